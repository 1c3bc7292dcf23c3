package computeapi

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"keel/internal/quota"
	"keel/internal/records"
	"keel/internal/store"
)

// keyPairRoutes adds os-keypairs: a user's key pairs, created with a
// generated key (whose private half is answered once and never kept) or
// imported, listed, shown and deleted, as Nova's at each microversion:
// type (ssh, x509) from 2.2, an admin naming another user_id from 2.10,
// paging from 2.35.
func (a *keyPairsAPI) keyPairRoutes(route func(string, bool, func(http.ResponseWriter, *http.Request) error)) {
	route("GET /compute/v2.1/os-keypairs", false, a.listKeyPairs)
	route("POST /compute/v2.1/os-keypairs", false, a.createKeyPair)
	route("GET /compute/v2.1/os-keypairs/{name}", false, a.showKeyPair)
	route("DELETE /compute/v2.1/os-keypairs/{name}", false, a.deleteKeyPair)
}

// keyPairUser is whose key pairs a request means: the caller's, or from
// 2.10 the user_id query parameter, for an admin only.
func keyPairUser(r *http.Request) (string, error) {
	c := caller(r)
	q := r.URL.Query()
	if !version(r).AtLeast(10) || !q.Has("user_id") {
		return c.UserID, nil
	}
	u := q.Get("user_id")
	if u != c.UserID && !c.Admin {
		return "", forbidden("os_compute_api:os-keypairs")
	}
	return u, nil
}

func keyPairNotFound(name, user string) error {
	return notFoundf("Keypair %s not found for user %s", name, user)
}

// keyPairView is a key pair as show answers it (create and list answer
// subsets).
func keyPairView(r *http.Request, kp records.KeyPair) map[string]any {
	v := map[string]any{
		"name": kp.Name, "public_key": kp.PublicKey, "fingerprint": kp.Fingerprint,
		"user_id": kp.UserID, "id": kp.ID, "created_at": timeStr(kp.CreatedAt),
		"updated_at": nil, "deleted_at": nil, "deleted": false,
	}
	if version(r).AtLeast(2) {
		v["type"] = kp.Type
	}
	return v
}

// listKeyPairs is GET /os-keypairs (limit and marker from 2.35).
func (a *keyPairsAPI) listKeyPairs(w http.ResponseWriter, r *http.Request) error {
	user, err := keyPairUser(r)
	if err != nil {
		return err
	}
	kps, err := a.store.ListKeyPairs(r.Context(), user)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit := -1
	if version(r).AtLeast(35) {
		if q.Has("limit") {
			n, err := strconv.Atoi(q.Get("limit"))
			if err != nil || n < 0 {
				return badRequest("Invalid input for query parameters limit. Value: " + q.Get("limit") + ". " + strconv.Quote(q.Get("limit")) + " is not a valid non-negative integer")
			}
			limit = n
		}
		if q.Has("marker") {
			m := q.Get("marker")
			i := slices.IndexFunc(kps, func(kp records.KeyPair) bool { return kp.Name == m })
			if i < 0 {
				return badRequest("marker [" + m + "] not found")
			}
			kps = kps[i+1:]
		}
	}
	more := limit >= 0 && len(kps) > limit
	if more {
		kps = kps[:limit]
	}
	out := make([]map[string]any, 0, len(kps))
	for _, kp := range kps {
		v := map[string]any{"name": kp.Name, "public_key": kp.PublicKey, "fingerprint": kp.Fingerprint}
		if version(r).AtLeast(2) {
			v["type"] = kp.Type
		}
		out = append(out, map[string]any{"keypair": v})
	}
	body := map[string]any{"keypairs": out}
	if more && len(kps) > 0 {
		next := url.Values{"limit": {strconv.Itoa(limit)}, "marker": {kps[len(kps)-1].Name}}
		if q.Has("user_id") {
			next.Set("user_id", user)
		}
		body["keypairs_links"] = []map[string]string{{"rel": "next", "href": a.baseURL + "/v2.1/os-keypairs?" + next.Encode()}}
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// showKeyPair is GET /os-keypairs/{name}.
func (a *keyPairsAPI) showKeyPair(w http.ResponseWriter, r *http.Request) error {
	user, err := keyPairUser(r)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	kp, err := a.store.GetKeyPair(r.Context(), user, name)
	if isNotFound(err) {
		return keyPairNotFound(name, user)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"keypair": keyPairView(r, kp)})
	return nil
}

// deleteKeyPair is DELETE /os-keypairs/{name}: 202 at 2.1, 204 from 2.2.
func (a *keyPairsAPI) deleteKeyPair(w http.ResponseWriter, r *http.Request) error {
	user, err := keyPairUser(r)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := a.store.DeleteKeyPair(r.Context(), user, name); isNotFound(err) {
		return keyPairNotFound(name, user)
	} else if err != nil {
		return err
	}
	if version(r).AtLeast(2) {
		w.WriteHeader(http.StatusNoContent)
	} else {
		w.WriteHeader(http.StatusAccepted)
	}
	return nil
}

// checkKeyPairName applies Nova's rule for key pair names before 2.92:
// 1 to 255 characters, letters, digits, spaces, '_' and '-' only.
func checkKeyPairName(name string) error {
	if name == "" || len(name) > 255 {
		return badRequest("Keypair data is invalid: Keypair name must be string and between 1 and 255 characters long")
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == ' ' || c == '_' || c == '-') {
			return badRequest("Keypair data is invalid: Keypair name contains unsafe characters")
		}
	}
	return nil
}

// createKeyPair is POST /os-keypairs: {"keypair": {"name", "public_key"
// (to import; else one is generated), "type" (2.2+), "user_id" (2.10+,
// an admin's for another user)}}. 200 at 2.1, 201 from 2.2.
func (a *keyPairsAPI) createKeyPair(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		KeyPair map[string]json.RawMessage `json:"keypair"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.KeyPair == nil {
		return badRequest("Invalid input for field/attribute keypair: 'keypair' is a required property")
	}
	allowed := map[string]bool{"name": true, "public_key": true}
	if version(r).AtLeast(2) {
		allowed["type"] = true
	}
	if version(r).AtLeast(10) {
		allowed["user_id"] = true
	}
	str := map[string]string{}
	for k, raw := range body.KeyPair {
		if !allowed[k] {
			return badRequest("Invalid input for field/attribute keypair. Additional properties are not allowed ('" + k + "' was unexpected)")
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return badRequest("Invalid input for field/attribute " + k + ". Value: " + string(raw) + ". It is not of type 'string'")
		}
		str[k] = s
	}
	name, ok := str["name"]
	if !ok {
		return badRequest("Invalid input for field/attribute keypair: 'name' is a required property")
	}
	if err := checkKeyPairName(name); err != nil {
		return err
	}
	typ := records.KeyPairSSH
	if t, ok := str["type"]; ok {
		if t != records.KeyPairSSH && t != records.KeyPairX509 {
			return badRequest("Invalid input for field/attribute type. Value: " + t + ". '" + t + "' is not one of ['ssh', 'x509']")
		}
		typ = t
	}
	c := caller(r)
	user := c.UserID
	if u, ok := str["user_id"]; ok && u != c.UserID {
		if !c.Admin {
			return forbidden("os_compute_api:os-keypairs:create")
		}
		user = u
	}
	kp := records.KeyPair{Name: name, UserID: user, Type: typ, CreatedAt: a.clock.Now().UTC()}
	private := ""
	if pub, ok := str["public_key"]; ok {
		fp, err := keyFingerprint(typ, pub)
		if err != nil {
			return badRequest("Keypair data is invalid: failed to generate fingerprint")
		}
		kp.PublicKey, kp.Fingerprint = pub, fp
	} else {
		var err error
		if private, kp.PublicKey, kp.Fingerprint, err = a.generateKey(typ, user); err != nil {
			return fmt.Errorf("generating a key pair: %w", err)
		}
	}
	if err := a.checkKeyPairQuota(r, c.ProjectID, user); err != nil {
		return err
	}
	kp, err := a.store.CreateKeyPair(r.Context(), kp)
	if errors.Is(err, store.ErrExists) {
		return conflict("Key pair '" + name + "' already exists.")
	}
	if err != nil {
		return err
	}
	v := map[string]any{"name": kp.Name, "public_key": kp.PublicKey, "fingerprint": kp.Fingerprint, "user_id": kp.UserID}
	if private != "" {
		v["private_key"] = private
	}
	status := http.StatusOK
	if version(r).AtLeast(2) {
		v["type"] = kp.Type
		status = http.StatusCreated
	}
	writeJSON(w, status, map[string]any{"keypair": v})
	return nil
}

// checkKeyPairQuota refuses a user's key pair past the project's
// key_pairs limit (Nova counts them per user). Two racing creates may
// both pass at the limit: the count is not taken inside the store's
// write.
func (a *keyPairsAPI) checkKeyPairQuota(r *http.Request, project, user string) error {
	lim, err := quota.ProjectLimits(r.Context(), a.store, project)
	if err != nil {
		return err
	}
	l := lim[quota.KeyPairs]
	if l < 0 {
		return nil
	}
	have, err := a.store.ListKeyPairs(r.Context(), user)
	if err != nil {
		return err
	}
	if int64(len(have)) >= l {
		return quota.Refusal("Quota exceeded, too many key pairs.")
	}
	return nil
}

func (a *keyPairsAPI) random() io.Reader {
	if a.rand != nil {
		return a.rand
	}
	return rand.Reader
}

// colonHex renders a digest as Nova's fingerprints: lower-case hex pairs
// joined by ':'.
func colonHex(b []byte) string {
	parts := make([]string, len(b))
	for i, c := range b {
		parts[i] = fmt.Sprintf("%02x", c)
	}
	return strings.Join(parts, ":")
}

// keyFingerprint checks an imported public key and gives its fingerprint:
// for ssh, an OpenSSH public key line ("TYPE BASE64 [comment]") whose
// blob is well formed and names TYPE, fingerprinted by the MD5 of the
// blob; for x509, a PEM certificate, by the SHA-1 of its DER form.
func keyFingerprint(typ, pub string) (string, error) {
	if typ == records.KeyPairX509 {
		block, _ := pem.Decode([]byte(pub))
		if block == nil {
			return "", errors.New("no PEM block")
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return "", err
		}
		sum := sha1.Sum(cert.Raw)
		return colonHex(sum[:]), nil
	}
	fields := strings.Fields(pub)
	if len(fields) < 2 {
		return "", errors.New("not 'TYPE KEY [comment]'")
	}
	blob, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil {
		return "", err
	}
	if err := checkSSHBlob(fields[0], blob); err != nil {
		return "", err
	}
	sum := md5.Sum(blob)
	return colonHex(sum[:]), nil
}

// sshKeyParts are how many length-prefixed fields follow the type name in
// each public key type's blob.
var sshKeyParts = map[string]int{
	"ssh-rsa": 2, "ssh-dss": 4, "ssh-ed25519": 1,
	"ecdsa-sha2-nistp256": 2, "ecdsa-sha2-nistp384": 2, "ecdsa-sha2-nistp521": 2,
}

// checkSSHBlob checks an SSH public key blob: the type name, then exactly
// the fields its type has, none of them empty (an ed25519 key 32 bytes).
func checkSSHBlob(typ string, blob []byte) error {
	next := func() ([]byte, error) {
		if len(blob) < 4 {
			return nil, errors.New("truncated key")
		}
		n := binary.BigEndian.Uint32(blob)
		if uint64(n) > uint64(len(blob)-4) {
			return nil, errors.New("truncated key")
		}
		f := blob[4 : 4+n]
		blob = blob[4+n:]
		return f, nil
	}
	parts, ok := sshKeyParts[typ]
	if !ok {
		return fmt.Errorf("unknown key type %q", typ)
	}
	name, err := next()
	if err != nil || string(name) != typ {
		return errors.New("the key's blob does not name its type")
	}
	for i := range parts {
		f, err := next()
		if err != nil {
			return err
		}
		if len(f) == 0 || typ == "ssh-ed25519" && len(f) != 32 || typ == "ssh-rsa" && i == 1 && len(f) > 16384/8+1 {
			return errors.New("malformed key")
		}
	}
	if len(blob) != 0 {
		return errors.New("trailing data after the key")
	}
	return nil
}

// sshString appends b as an SSH wire-format string.
func sshString(out *bytes.Buffer, b []byte) {
	_ = binary.Write(out, binary.BigEndian, uint32(len(b)))
	out.Write(b)
}

// sshMPInt appends a non-negative integer in SSH's mpint form.
func sshMPInt(out *bytes.Buffer, n *big.Int) {
	b := n.Bytes()
	if len(b) > 0 && b[0]&0x80 != 0 {
		b = append([]byte{0}, b...)
	}
	sshString(out, b)
}

// generateKey makes a new 2048-bit RSA key pair as Nova does: for ssh an
// OpenSSH public key line, for x509 a self-signed certificate naming the
// user; the private key in PEM (PKCS #1).
func (a *keyPairsAPI) generateKey(typ, user string) (private, public, fingerprint string, err error) {
	key, err := rsa.GenerateKey(a.random(), 2048)
	if err != nil {
		return "", "", "", err
	}
	private = string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	if typ == records.KeyPairX509 {
		now := a.clock.Now()
		serial, err := rand.Int(a.random(), new(big.Int).Lsh(big.NewInt(1), 63))
		if err != nil {
			return "", "", "", err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial, Subject: pkix.Name{CommonName: user, Organization: []string{"keel"}},
			NotBefore: now.Add(-time.Minute), NotAfter: now.AddDate(10, 0, 0),
		}
		der, err := x509.CreateCertificate(a.random(), tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			return "", "", "", err
		}
		sum := sha1.Sum(der)
		return private, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), colonHex(sum[:]), nil
	}
	var blob bytes.Buffer
	sshString(&blob, []byte("ssh-rsa"))
	sshMPInt(&blob, big.NewInt(int64(key.PublicKey.E)))
	sshMPInt(&blob, key.PublicKey.N)
	sum := md5.Sum(blob.Bytes())
	public = "ssh-rsa " + base64.StdEncoding.EncodeToString(blob.Bytes()) + " Generated-by-keel"
	return private, public, colonHex(sum[:]), nil
}

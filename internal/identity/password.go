package identity

import (
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
)

// Password hashes look like "$pbkdf2-sha256$<iterations>$<salt>$<key>", salt
// and key in standard base64 without padding.
const (
	hashScheme    = "pbkdf2-sha256"
	hashKeyLen    = 32
	hashSaltLen   = 16
	maxIterations = 10_000_000
)

// hashIterations is the cost of new hashes. OWASP's 2023 figure for
// PBKDF2-HMAC-SHA256; tests lower it.
var hashIterations = 600_000

// HashPassword returns a salted PBKDF2-HMAC-SHA256 hash of password.
func HashPassword(password string) (string, error) {
	salt := make([]byte, hashSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("hashing password: reading salt: %w", err)
	}
	key, err := pbkdf2.Key(sha256.New, password, salt, hashIterations, hashKeyLen)
	if err != nil {
		return "", fmt.Errorf("hashing password: %w", err)
	}
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$%s$%d$%s$%s", hashScheme, hashIterations, enc.EncodeToString(salt), enc.EncodeToString(key)), nil
}

// CheckPassword reports whether password matches hash. A hash it cannot
// parse is an error (a damaged directory file), not a mismatch.
func CheckPassword(hash, password string) (bool, error) {
	iter, salt, want, err := parseHash(hash)
	if err != nil {
		return false, fmt.Errorf("checking password: %w", err)
	}
	got, err := pbkdf2.Key(sha256.New, password, salt, iter, len(want))
	if err != nil {
		return false, fmt.Errorf("checking password: %w", err)
	}
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

// parseHash splits a hash made by HashPassword.
func parseHash(hash string) (iter int, salt, key []byte, err error) {
	parts := strings.Split(hash, "$")
	if len(parts) != 5 || parts[0] != "" || parts[1] != hashScheme {
		return 0, nil, nil, errors.New("not a $pbkdf2-sha256$ hash")
	}
	iter, err = strconv.Atoi(parts[2])
	if err != nil || iter < 1 || iter > maxIterations {
		return 0, nil, nil, fmt.Errorf("bad iteration count %q", parts[2])
	}
	enc := base64.RawStdEncoding
	if salt, err = enc.DecodeString(parts[3]); err != nil || len(salt) == 0 {
		return 0, nil, nil, errors.New("bad salt")
	}
	if key, err = enc.DecodeString(parts[4]); err != nil || len(key) < 16 {
		return 0, nil, nil, errors.New("bad key")
	}
	return iter, salt, key, nil
}

// hashSlots bounds the password checks running at once, so a flood of
// logins (each check costs about a tenth of a second of CPU) queues
// instead of starving the rest of the API of CPU.
var hashSlots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))

// passwordChecks counts the password checks made (the login throttle's
// tests read it).
var passwordChecks atomic.Int64

// hashFunc makes new password hashes (HashPassword; a test slows it).
var hashFunc = HashPassword

// hashPassword is HashPassword holding one of hashSlots. The API hashes a
// new password before its directory update, never inside it: a hash costs
// about a tenth of a second of CPU, seconds on a loaded machine, and an
// update holds the directory's lock and runs under sharedTimeout, which
// bounds the store's read and write. Hashed inside, a user created or a
// password changed at load 60-80 ran out of that bound and answered 500.
func (i *Issuer) hashPassword(password string) (string, error) {
	hashSlots <- struct{}{}
	defer func() { <-hashSlots }()
	return hashFunc(password)
}

// checkPassword is CheckPassword holding one of hashSlots.
func (i *Issuer) checkPassword(hash, password string) (bool, error) {
	passwordChecks.Add(1)
	hashSlots <- struct{}{}
	defer func() { <-hashSlots }()
	return CheckPassword(hash, password)
}

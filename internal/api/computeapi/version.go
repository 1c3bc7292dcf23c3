package computeapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Microversion is a compute API microversion, 2.N.
type Microversion struct{ Major, Minor int }

// Supported microversions.
var (
	MinVersion = Microversion{2, 1}
	MaxVersion = Microversion{2, 91}
)

func (v Microversion) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// AtLeast reports whether v ≥ 2.minor.
func (v Microversion) AtLeast(minor int) bool {
	return v.Major > 2 || (v.Major == 2 && v.Minor >= minor)
}

func (v Microversion) less(o Microversion) bool {
	return v.Major < o.Major || (v.Major == o.Major && v.Minor < o.Minor)
}

// parseVersion reads the requested microversion from
// OpenStack-API-Version ("compute 2.25") or X-OpenStack-Nova-API-Version
// ("2.25"); absent means 2.1, "latest" the maximum. A version out of range
// is an error (HTTP 406).
func parseVersion(h http.Header) (Microversion, error) {
	raw := ""
	for _, v := range h.Values("OpenStack-API-Version") {
		for _, part := range strings.Split(v, ",") {
			f := strings.Fields(strings.TrimSpace(part))
			if len(f) == 2 && strings.EqualFold(f[0], "compute") {
				raw = f[1]
			}
		}
	}
	if raw == "" {
		raw = strings.TrimSpace(h.Get("X-OpenStack-Nova-API-Version"))
	}
	if raw == "" {
		return MinVersion, nil
	}
	if strings.EqualFold(raw, "latest") {
		return MaxVersion, nil
	}
	major, minor, ok := strings.Cut(raw, ".")
	if !ok || !canonicalNumber(major) || !canonicalNumber(minor) || major == "0" {
		return Microversion{}, &malformedVersion{fmt.Sprintf("API Version String %s is of invalid format. Must be of format MajorNum.MinorNum.", raw)}
	}
	unsupported := fmt.Errorf("Version %s is not supported by the API. Minimum is %s and maximum is %s.", raw, MinVersion, MaxVersion)
	// Well formed, but a number past int's range is past the maximum too
	// (Nova's integers have no bound: 406, not 400).
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		return Microversion{}, unsupported
	}
	v := Microversion{ma, mi}
	if v.less(MinVersion) || MaxVersion.less(v) {
		return Microversion{}, unsupported
	}
	return v, nil
}

// malformedVersion is a microversion that is not MAJOR.MINOR: a 400, where
// a well-formed version out of range is a 406 (as Nova answers).
type malformedVersion struct{ msg string }

func (e *malformedVersion) Error() string { return e.msg }

// canonicalNumber reports whether s is a decimal number without a sign or
// leading zeros ("0" itself is one): "01" is not a version number.
func canonicalNumber(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

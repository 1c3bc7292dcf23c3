package computeapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"

	"keel/internal/quota"
)

// checkPersonality applies Nova's rules for a server body's personality
// (files to inject): from microversion 2.57 the field is gone from the
// schema, so any personality is a 400; before, it is a list of objects
// with a string path and string contents in base64, nothing else. keel's
// guests run no OS, so valid files are accepted and not written anywhere.
func checkPersonality(mv Microversion, sb serverBody) ([]personalityFile, error) {
	raw, ok := sb["personality"]
	if !ok {
		return nil, nil
	}
	if mv.AtLeast(57) {
		return nil, badRequest("Invalid input for field/attribute server. Additional properties are not allowed ('personality' was unexpected)")
	}
	var files []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &files); err != nil {
		return nil, badRequest("Invalid input for field/attribute personality. Value: " + string(raw) + ". is not of type 'array'")
	}
	for _, f := range files {
		if f == nil {
			return nil, badRequest("Invalid input for field/attribute personality. Value: null. None is not of type 'object'")
		}
		for k, v := range f {
			var s string
			switch k {
			case "path", "contents":
				if err := json.Unmarshal(v, &s); err != nil {
					return nil, badRequest("Invalid input for field/attribute " + k + ". Value: " + string(v) + ". " + string(v) + " is not of type 'string'")
				}
			default:
				return nil, badRequest("Invalid input for field/attribute personality. Additional properties are not allowed ('" + k + "' was unexpected)")
			}
			if k == "contents" && !isBase64(s) {
				return nil, badRequest("Invalid input for field/attribute contents. Value: " + s + ". '" + s + "' is not a 'base64'")
			}
		}
	}
	var out []personalityFile
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, badRequest("Invalid input for field/attribute personality. Value: " + string(raw) + ". is not of type 'array'")
	}
	return out, nil
}

// isBase64 decodes as Nova's format check does (Python's decodebytes):
// characters outside the alphabet are dropped, the rest must decode with
// correct padding.
func isBase64(s string) bool {
	kept := strings.Map(func(c rune) rune {
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '+', c == '/', c == '=':
			return c
		}
		return -1
	}, s)
	_, err := base64.StdEncoding.DecodeString(kept)
	return err == nil
}

// personalityFile is one file of a create request's personality (checked
// by checkPersonality).
type personalityFile struct{ Path, Contents string }

// checkPersonalityQuota applies the project's injected file limits to a
// (valid) personality, with Nova's 403s: at most injected_files files,
// each path at most injected_file_path_bytes long and each contents (as
// sent, in base64) at most injected_file_content_bytes.
func (a *serversAPI) checkPersonalityQuota(ctx context.Context, project string, files []personalityFile) error {
	if len(files) == 0 {
		return nil
	}
	lim, err := quota.ProjectLimits(ctx, a.store, project)
	if err != nil {
		return err
	}
	if l := lim[quota.InjectedFiles]; l >= 0 && int64(len(files)) > l {
		return quota.Refusal("Personality file limit exceeded")
	}
	for _, f := range files {
		if l := lim[quota.InjectedPathBytes]; l >= 0 && int64(len(f.Path)) > l {
			return quota.Refusal("Personality file path exceeds maximum " + strconv.FormatInt(l, 10))
		}
		if l := lim[quota.InjectedFileBytes]; l >= 0 && int64(len(f.Contents)) > l {
			return quota.Refusal("Personality file content exceeds maximum " + strconv.FormatInt(l, 10))
		}
	}
	return nil
}

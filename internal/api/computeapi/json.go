package computeapi

import "encoding/json"

type jsonRaw = json.RawMessage

func unmarshalRaw(raw jsonRaw, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return json.Unmarshal(raw, v)
}

package plan

import "strconv"

// Count is n and the noun for n, as plan texts print counts: Count(1,
// "move", "moves") is "1 move", Count(2, "move", "moves") "2 moves".
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

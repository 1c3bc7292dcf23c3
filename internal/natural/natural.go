// Package natural orders names as people count: a run of digits compares
// as a number, so vm2 comes before vm10 and h9 before h10.
package natural

import "strings"

// Compare orders a and b naturally: -1, 0 or +1. Runs of digits compare
// by value (leading zeros ignored, then the shorter run first, so "h01"
// and "h1" are told apart); everything else compares byte by byte.
func Compare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			if c := compareNumbers(a[:da], b[:db]); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			if a[0] < b[0] {
				return -1
			}
			return 1
		}
		a, b = a[1:], b[1:]
	}
	switch {
	case a == "" && b == "":
		return 0
	case a == "":
		return -1
	}
	return 1
}

// Less reports whether a sorts before b.
func Less(a, b string) bool { return Compare(a, b) < 0 }

func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

func compareNumbers(a, b string) int {
	ta, tb := strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	switch {
	case len(ta) != len(tb):
		return cmp(len(ta), len(tb))
	case ta != tb:
		return strings.Compare(ta, tb)
	}
	return cmp(len(a), len(b))
}

func cmp(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

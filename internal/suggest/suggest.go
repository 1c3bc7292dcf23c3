// Package suggest finds the name a user probably meant: the one "did you
// mean" suggester of keel's configuration, scenario files and --set
// flags.
package suggest

import (
	"slices"
	"strings"
)

// MaxEdits is the most single-character edits (insertions, deletions,
// substitutions) between a word and a name still suggested for it.
const MaxEdits = 2

// Fold is the form names are compared in: lower case, '-' as '_'.
func Fold(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }

// Closest returns the name nearest to word, compared folded, within
// MaxEdits; on a tie, the first in sorted order. It returns "" when no
// name is that near, or word is one of names.
func Closest(word string, names []string) string {
	if slices.Contains(names, word) {
		return ""
	}
	best, bestD := "", MaxEdits+1
	fw := Fold(word)
	for _, n := range names {
		d := Distance(fw, Fold(n))
		if d < bestD || d == bestD && n < best {
			best, bestD = n, d
		}
	}
	return best
}

// Distance is the Levenshtein distance between a and b, in bytes.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

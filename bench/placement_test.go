package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestTimeCandidatesSideBySide checks the candidates timing's method:
// both servers are asked in turn (ABBA), every timed answer is read into
// the same buffer (the reads allocate far less than the answers' bytes),
// and each server's candidate count comes from its own answer.
func TestTimeCandidatesSideBySide(t *testing.T) {
	var mu sync.Mutex
	var order []string
	answer := func(name string, n int) http.Handler {
		reqs := strings.TrimSuffix(strings.Repeat(`{"allocations":{}},`, n), ",")
		// A megabyte the decoder skips: the transfer, not the decoding.
		body := []byte(`{"allocation_requests":[` + reqs + `],"padding":"` + strings.Repeat("x", 1<<20) + `"}`)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			_, _ = w.Write(body)
		})
	}
	a := httptest.NewServer(answer("a", 3))
	defer a.Close()
	b := httptest.NewServer(answer("b", 5))
	defer b.Close()
	ctx := context.Background()
	clients := []*httpClient{newHTTPClient(a.URL, "t", ""), newHTTPClient(b.URL, "t", "")}

	const reps = 20
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	took, got, err := timeCandidates(ctx, clients, "/", reps)
	runtime.ReadMemStats(&m1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 3 || got[1] != 5 {
		t.Errorf("candidates %v, want [3 5]", got)
	}
	if !(took[0] > 0 && took[1] > 0) {
		t.Errorf("medians %v ms, want both positive", took)
	}
	want := "ab" + strings.Repeat("abba", reps/2)
	if s := strings.Join(order, ""); s != want {
		t.Errorf("requests in the order %s, want %s", s, want)
	}
	// 2 × 20 timed answers of 1 MiB each: read into new buffers they
	// would allocate 40 MiB; into the kept ones, the warm-ups' 2 MiB and
	// the servers' and transports' small change.
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 8<<20 {
		t.Errorf("timing allocated %d MiB, want < 8 MiB (each answer read into the same buffer)", alloc>>20)
	}
}

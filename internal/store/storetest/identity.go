package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"keel/internal/store"
)

var identityTests = []subtest{
	{"IdentityDocument", testIdentityDocument},
	{"IdentityConcurrentWrites", testIdentityConcurrentWrites},
	{"AgentCredentials", testAgentCredentials},
}

// testIdentityDocument: none before the first write; a write at the stored
// version bumps it; a write at a stale version, or a second first write,
// is refused and changes nothing.
func testIdentityDocument(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, _, err := s.GetIdentity(ctx, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("identity of a new store: %v, want ErrNotFound", err)
	}
	if _, err := s.PutIdentity(ctx, []byte(`{"a":1}`), 3); !errors.Is(err, store.ErrStaleIdentity) {
		t.Fatalf("update of a document that is not there: %v, want ErrStaleIdentity", err)
	}
	v, err := s.PutIdentity(ctx, []byte(`{"a":1}`), 0)
	if err != nil || v != 1 {
		t.Fatalf("first write: version %d, %v", v, err)
	}
	if _, err := s.PutIdentity(ctx, []byte(`{"b":2}`), 0); !errors.Is(err, store.ErrStaleIdentity) {
		t.Fatalf("a second first write: %v, want ErrStaleIdentity", err)
	}
	if v, err = s.PutIdentity(ctx, []byte(`{"a":2}`), 1); err != nil || v != 2 {
		t.Fatalf("write at version 1: version %d, %v", v, err)
	}
	if _, err := s.PutIdentity(ctx, []byte(`{"stale":true}`), 1); !errors.Is(err, store.ErrStaleIdentity) {
		t.Fatalf("write at a stale version: %v, want ErrStaleIdentity", err)
	}
	doc, v, err := s.GetIdentity(ctx, 0)
	if err != nil || v != 2 || string(doc) != `{"a":2}` {
		t.Fatalf("read back %q at version %d (%v), want {\"a\":2} at 2", doc, v, err)
	}
	// Asked with the version it has, a reader gets no document.
	if doc, v, err := s.GetIdentity(ctx, 2); err != nil || doc != nil || v != 2 {
		t.Fatalf("read at the known version: %q, %d, %v; want nil at 2", doc, v, err)
	}
	if doc, v, err := s.GetIdentity(ctx, 1); err != nil || string(doc) != `{"a":2}` || v != 2 {
		t.Fatalf("read at an older version: %q, %d, %v", doc, v, err)
	}
}

// testIdentityConcurrentWrites: writers that read, change and write with
// retries lose no change (each appends its own mark).
func testIdentityConcurrentWrites(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.PutIdentity(ctx, []byte(""), 0); err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				for {
					doc, v, err := s.GetIdentity(ctx, 0)
					if err != nil {
						errs <- err
						return
					}
					_, err = s.PutIdentity(ctx, append(doc, fmt.Sprintf("[%d.%d]", w, i)...), v)
					if err == nil {
						break
					}
					if !errors.Is(err, store.ErrStaleIdentity) {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	doc, v, err := s.GetIdentity(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v != 1+writers*each {
		t.Errorf("version %d after %d writes, want %d", v, writers*each, 1+writers*each)
	}
	for w := range writers {
		for i := range each {
			if mark := fmt.Sprintf("[%d.%d]", w, i); !strings.Contains(string(doc), mark) {
				t.Errorf("write %s lost: %s", mark, doc)
			}
		}
	}
}

// testAgentCredentials: records are stored, replaced and listed by host.
func testAgentCredentials(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.GetAgentCredential(ctx, "h1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("credential of a host never enrolled: %v, want ErrNotFound", err)
	}
	if l, err := s.ListAgentCredentials(ctx); err != nil || l == nil || len(l) != 0 {
		t.Fatalf("list of none: %v, %v", l, err)
	}
	for _, c := range []store.AgentCredential{
		{Host: "h2", Epoch: 1, UpdatedAt: 10},
		{Host: "h1", Epoch: 1, UpdatedAt: 11},
		{Host: "h1", Epoch: 1, Revoked: true, UpdatedAt: 12},
	} {
		if err := s.PutAgentCredential(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.GetAgentCredential(ctx, "h1")
	if err != nil || got != (store.AgentCredential{Host: "h1", Epoch: 1, Revoked: true, UpdatedAt: 12}) {
		t.Fatalf("h1: %+v, %v", got, err)
	}
	l, err := s.ListAgentCredentials(ctx)
	if err != nil || len(l) != 2 || l[0].Host != "h1" || l[1].Host != "h2" || !l[0].Revoked || l[1].Revoked {
		t.Fatalf("list: %+v, %v", l, err)
	}
}

package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"keel/internal/store/memory"
)

// sharedPair is two issuers (two replicas) on one store, refreshing every
// 50 ms.
func sharedPair(t *testing.T) (a, b *Issuer) {
	t.Helper()
	st := memory.New()
	doc, err := json.Marshal(NewDevDirectory(testPassword))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutIdentity(context.Background(), doc, 0); err != nil {
		t.Fatal(err)
	}
	mk := func() *Issuer {
		return &Issuer{Key: make([]byte, KeySize), Shared: st, Refresh: 50 * time.Millisecond}
	}
	return mk(), mk()
}

// within waits up to d for ok.
func within(t *testing.T, d time.Duration, what string, ok func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := ok()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSharedDirectoryAcrossIssuers: a user added on A is usable on B, a
// token A revokes and a role A removes are refused on B, each within B's
// refresh (plus scheduling slack).
func TestSharedDirectoryAcrossIssuers(t *testing.T) {
	a, b := sharedPair(t)
	ctx := context.Background()
	carol, carolProj := UserID(DefaultDomainID, "carol"), ProjectID(DefaultDomainID, "carol")
	if _, _, err := b.Issue(carol, carolProj); !errors.Is(err, ErrUnknownUser) {
		t.Fatalf("carol on B before she exists: %v", err)
	}
	if err := a.Update(ctx, func(d *Directory) error { return d.AddMember("carol", "c-pw") }); err != nil {
		t.Fatal(err)
	}
	var tok string
	took := within(t, time.Second, "carol usable on B", func() (err error) {
		tok, _, err = b.Issue(carol, carolProj)
		return err
	})
	t.Logf("a user created on A was usable on B after %v", took)
	p, err := a.Validate(tok)
	if err != nil {
		t.Fatalf("B's token on A: %v", err)
	}
	if err := a.Update(ctx, func(d *Directory) error {
		d.Revoke(p.AuditID, p.ExpiresAt, time.Now())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Validate(tok); !errors.Is(err, ErrTokenRevoked) {
		t.Fatalf("revoked token on A itself: %v", err)
	}
	took = within(t, time.Second, "the revoked token refused on B", func() error {
		if _, err := b.Validate(tok); !errors.Is(err, ErrTokenRevoked) {
			return fmt.Errorf("B still answers %v", err)
		}
		return nil
	})
	t.Logf("a token revoked on A was refused on B after %v", took)

	tok2, _, err := b.Issue(carol, carolProj)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Update(ctx, func(d *Directory) error {
		if !d.Ungrant(carol, carolProj, RoleMember) {
			return errors.New("carol had no member role")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "a removed role ends the token on A", func() error {
		if _, err := a.Validate(tok2); !errors.Is(err, ErrTokenRevoked) {
			return fmt.Errorf("A still answers %v", err)
		}
		return nil
	})
}

// TestSharedDirectoryConcurrentUpdates: changes made on both replicas at
// once all stay (a write based on a stale read is redone, not lost).
func TestSharedDirectoryConcurrentUpdates(t *testing.T) {
	a, b := sharedPair(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 10 {
		for _, iss := range []*Issuer{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("p%d-%p", i, iss)
				if err := iss.Update(ctx, func(d *Directory) error { _, err := d.AddProject(name); return err }); err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	within(t, time.Second, "every project on both", func() error {
		for _, iss := range []*Issuer{a, b} {
			if n := len(iss.dir().Projects); n != 3+20 {
				return fmt.Errorf("%d projects, want 23", n)
			}
		}
		return nil
	})
}

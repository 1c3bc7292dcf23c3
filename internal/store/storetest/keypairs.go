package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"keel/internal/records"
	"keel/internal/store"
)

var keyPairTests = []subtest{
	{"KeyPairs", testKeyPairs},
	{"KeyPairsConcurrentCreate", testKeyPairsConcurrentCreate},
}

// testKeyPairs: a created pair reads back whole with an id of its own;
// names are unique per user, not across users; lists are per user, by
// name; a delete removes one user's pair only, and twice is ErrNotFound.
func testKeyPairs(t *testing.T, s store.Store) {
	ctx := context.Background()
	at := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	mk := func(user, name string) records.KeyPair {
		return records.KeyPair{Name: name, UserID: user, Type: records.KeyPairSSH,
			PublicKey: "ssh-rsa AAAA " + name, Fingerprint: "aa:bb:" + name, CreatedAt: at}
	}
	if got, err := s.ListKeyPairs(ctx, "u1"); err != nil || len(got) != 0 {
		t.Fatalf("list of a user with none: %v, %v", got, err)
	}
	b, err := s.CreateKeyPair(ctx, mk("u1", "b"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.CreateKeyPair(ctx, mk("u1", "a"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.CreateKeyPair(ctx, mk("u2", "a"))
	if err != nil {
		t.Fatalf("the same name for another user: %v", err)
	}
	if a.ID == 0 || a.ID == b.ID || other.ID == a.ID || other.ID == b.ID {
		t.Fatalf("ids %d %d %d: want distinct and non-zero", b.ID, a.ID, other.ID)
	}
	if _, err := s.CreateKeyPair(ctx, mk("u1", "a")); !errors.Is(err, store.ErrExists) {
		t.Fatalf("duplicate name: %v, want ErrExists", err)
	}
	got, err := s.GetKeyPair(ctx, "u1", "a")
	if err != nil {
		t.Fatal(err)
	}
	if got != a || !got.CreatedAt.Equal(at) || got.PublicKey != "ssh-rsa AAAA a" {
		t.Fatalf("get %+v, want %+v", got, a)
	}
	if _, err := s.GetKeyPair(ctx, "u3", "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another user's name: %v, want ErrNotFound", err)
	}
	list, err := s.ListKeyPairs(ctx, "u1")
	if err != nil || len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" || list[0].ID != a.ID {
		t.Fatalf("list of u1: %+v, %v", list, err)
	}
	if err := s.DeleteKeyPair(ctx, "u1", "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteKeyPair(ctx, "u1", "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	if _, err := s.GetKeyPair(ctx, "u2", "a"); err != nil {
		t.Fatalf("u1's delete took u2's pair: %v", err)
	}
	if list, _ := s.ListKeyPairs(ctx, "u1"); len(list) != 1 || list[0].Name != "b" {
		t.Fatalf("after delete: %+v", list)
	}
	again, err := s.CreateKeyPair(ctx, mk("u1", "a"))
	if err != nil || again.ID == a.ID {
		t.Fatalf("re-create after delete: %+v, %v (want a new id)", again, err)
	}
}

// testKeyPairsConcurrentCreate: of racing creates of one name exactly one
// wins; the others get ErrExists.
func testKeyPairsConcurrentCreate(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.CreateKeyPair(ctx, records.KeyPair{Name: "k", UserID: "u", Type: records.KeyPairSSH, PublicKey: "p", Fingerprint: "f"})
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrExists):
			t.Errorf("racing create: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d racing creates won, want 1", won, n)
	}
	if list, err := s.ListKeyPairs(ctx, "u"); err != nil || len(list) != 1 {
		t.Fatalf("after the race: %+v, %v", list, err)
	}
}

package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"keel/internal/store"
)

// reloadEvery bounds how often an Issuer with a Path looks at the file's
// modification time.
const reloadEvery = time.Second

// DefaultRefresh is how often an Issuer with a Shared store asks it
// whether the directory changed: the bound on how long a user created, a
// role removed or a token revoked on another replica takes to hold here.
const DefaultRefresh = time.Second

// sharedTimeout bounds one read or write of the shared directory (a
// test shortens it).
var sharedTimeout = 10 * time.Second

// maxUpdateTries bounds how often Update redoes a change another replica's
// write overtook.
const maxUpdateTries = 20

// liveDir is the directory an Issuer serves from: published whole, so a
// reader never sees half an update.
type liveDir struct {
	once    sync.Once
	mu      sync.Mutex // serialises Update and reloads
	cur     atomic.Pointer[Directory]
	checked atomic.Int64 // Unix nanoseconds of the last look at the file or store
	stamp   fileStamp    // the file as last loaded or saved (under mu)
	version int64        // the shared document's version of cur (under mu)
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func statFile(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{st.ModTime(), st.Size()}, nil
}

func (i *Issuer) refreshEvery() time.Duration {
	switch {
	case i.Shared == nil:
		return reloadEvery
	case i.Refresh > 0:
		return i.Refresh
	}
	return DefaultRefresh
}

// dir is the directory now in force. With a Path it is reloaded when the
// file changed on disk (another process, or an operator's edit), at most
// once a second; a file that no longer loads keeps the last good one. With
// a Shared store it is read again when its version changed, at most once
// per Refresh; a failed read keeps the last good one.
func (i *Issuer) dir() *Directory {
	l := &i.live
	// The first look at the file reloads it: Directory may be older.
	l.once.Do(func() {
		if i.Shared == nil {
			l.cur.Store(i.Directory)
		} else {
			i.reloadShared(true)
		}
	})
	if i.Path != "" || i.Shared != nil {
		now := time.Now().UnixNano()
		if last := l.checked.Load(); now-last >= int64(i.refreshEvery()) && l.checked.CompareAndSwap(last, now) {
			if i.Shared != nil {
				i.reloadShared(false)
			} else {
				i.reload()
			}
		}
	}
	return l.cur.Load()
}

func (i *Issuer) reload() {
	l := &i.live
	l.mu.Lock()
	defer l.mu.Unlock()
	st, err := statFile(i.Path)
	if err != nil || st == l.stamp {
		return
	}
	d, err := LoadDirectory(i.Path)
	if err != nil {
		return // a half-edited or broken file: keep serving the last good one
	}
	l.stamp = st
	l.cur.Store(d)
}

// reloadShared reads the shared directory if its version is not the one
// in force (first: whatever the version).
func (i *Issuer) reloadShared(first bool) {
	l := &i.live
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
	defer cancel()
	known := l.version
	if first {
		known = 0
	}
	d, v, err := loadShared(ctx, i.Shared, known)
	if err != nil || d == nil {
		return // unchanged, or the store is unreachable: keep the last good one
	}
	l.version = v
	l.cur.Store(d)
}

// loadShared reads the directory from st: nil if its version is known.
func loadShared(ctx context.Context, st store.IdentityStore, known int64) (*Directory, int64, error) {
	doc, v, err := st.GetIdentity(ctx, known)
	if err != nil {
		return nil, 0, err
	}
	if doc == nil {
		return nil, v, nil
	}
	d, err := DecodeDirectory(doc)
	if err != nil {
		return nil, 0, fmt.Errorf("the identity directory in the store (version %d): %w", v, err)
	}
	return d, v, nil
}

// DecodeDirectory parses and validates a directory document (Save's or
// the shared store's JSON).
func DecodeDirectory(doc []byte) (*Directory, error) {
	var d Directory
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// ErrReadOnly: the Issuer has no directory to change.
var ErrReadOnly = errors.New("the identity directory cannot be changed here")

// Update changes the directory: fn works on a copy of the current one,
// which is checked (Validate), saved to Path or the Shared store if the
// Issuer has one, and then published. Updates are serialised; fn's error
// is returned as is. With a Shared store, fn is run again on the newer
// directory when another replica wrote first, so it must only change the
// copy it is given (and whatever it returns through its closure).
func (i *Issuer) Update(ctx context.Context, fn func(*Directory) error) error {
	cur := i.dir()
	if cur == nil {
		return ErrReadOnly
	}
	l := &i.live
	l.mu.Lock()
	defer l.mu.Unlock()
	if i.Shared != nil {
		return i.updateShared(ctx, fn)
	}
	next, err := l.cur.Load().clone()
	if err != nil {
		return err
	}
	if err := fn(next); err != nil {
		return err
	}
	if err := next.Validate(); err != nil {
		return fmt.Errorf("updating the identity directory: %w", err)
	}
	if i.Path != "" {
		if err := next.Save(i.Path); err != nil {
			return fmt.Errorf("updating the identity directory: %w", err)
		}
		l.stamp, _ = statFile(i.Path)
	}
	l.cur.Store(next)
	return nil
}

// updateShared is Update on the shared store (under l.mu).
func (i *Issuer) updateShared(ctx context.Context, fn func(*Directory) error) error {
	l := &i.live
	ctx, cancel := context.WithTimeout(ctx, sharedTimeout)
	defer cancel()
	for try := 0; ; try++ {
		// Start from the newest: a change made elsewhere since the last
		// refresh must not be written over.
		if d, v, err := loadShared(ctx, i.Shared, l.version); err != nil {
			return fmt.Errorf("updating the identity directory: %w", err)
		} else if d != nil {
			l.version = v
			l.cur.Store(d)
		}
		next, err := l.cur.Load().clone()
		if err != nil {
			return err
		}
		if err := fn(next); err != nil {
			return err
		}
		if err := next.Validate(); err != nil {
			return fmt.Errorf("updating the identity directory: %w", err)
		}
		doc, err := json.Marshal(next)
		if err != nil {
			return fmt.Errorf("updating the identity directory: %w", err)
		}
		v, err := i.Shared.PutIdentity(ctx, doc, l.version)
		if err == nil {
			l.version = v
			l.cur.Store(next)
			return nil
		}
		if !errors.Is(err, store.ErrStaleIdentity) || try+1 >= maxUpdateTries {
			return fmt.Errorf("updating the identity directory: %w", err)
		}
	}
}

package identity

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// reloadEvery bounds how often an Issuer with a Path looks at the file's
// modification time.
const reloadEvery = time.Second

// liveDir is the directory an Issuer serves from: published whole, so a
// reader never sees half an update.
type liveDir struct {
	once    sync.Once
	mu      sync.Mutex // serialises Update and reloads
	cur     atomic.Pointer[Directory]
	checked atomic.Int64 // Unix nanoseconds of the last look at the file
	stamp   fileStamp    // the file as last loaded or saved (under mu)
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

// dir is the directory now in force. With a Path it is reloaded when the
// file changed on disk (another process, or an operator's edit), at most
// once a second; a file that no longer loads keeps the last good one.
func (i *Issuer) dir() *Directory {
	l := &i.live
	// The first look at the file reloads it: Directory may be older.
	l.once.Do(func() { l.cur.Store(i.Directory) })
	if i.Path != "" {
		now := time.Now().UnixNano()
		if last := l.checked.Load(); now-last >= int64(reloadEvery) && l.checked.CompareAndSwap(last, now) {
			i.reload()
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

// ErrReadOnly: the Issuer has no directory to change.
var ErrReadOnly = errors.New("the identity directory cannot be changed here")

// Update changes the directory: fn works on a copy of the current one,
// which is checked (Validate), saved to Path if the Issuer has one, and
// then published. Updates are serialised; fn's error is returned as is.
func (i *Issuer) Update(fn func(*Directory) error) error {
	cur := i.dir()
	if cur == nil {
		return ErrReadOnly
	}
	l := &i.live
	l.mu.Lock()
	defer l.mu.Unlock()
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

package natsjs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// lockFile is the name of the data dir's lock, beside nats-server's jetstream/.
const lockFile = "agentbus.lock"

// dataDir is the embedded server's store directory, with what of it this
// start made, so that a start that fails removes that and nothing else.
type dataDir struct {
	path string
	// made are the paths this start created, outermost first: the
	// directory's first missing ancestor (or itself), the lock file,
	// jetstream/.
	made []string
}

// makeDataDir creates the store directory path, if missing, and notes
// what of it is missing before the embedded server writes there.
func makeDataDir(path string) (*dataDir, error) {
	d := &dataDir{path: path}
	if top, err := firstMissing(path); err != nil {
		return nil, fmt.Errorf("embedded nats: data dir: %w", err)
	} else if top != "" {
		d.made = append(d.made, top)
	}
	if err := os.MkdirAll(path, 0o750); err != nil {
		return nil, fmt.Errorf("embedded nats: data dir: %w", err)
	}
	for _, name := range []string{lockFile, "jetstream"} {
		p := filepath.Join(path, name)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			d.made = append(d.made, p)
		}
	}
	return d, nil
}

// remove removes what makeDataDir noted as made by this start, with all
// that was written in it since.
func (d *dataDir) remove() error {
	var errs []error
	for i := len(d.made) - 1; i >= 0; i-- {
		if err := os.RemoveAll(d.made[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// firstMissing returns the outermost directory on the way to path that
// does not exist (path itself when only it is missing), or "" when path
// exists.
func firstMissing(path string) (string, error) {
	path = filepath.Clean(path)
	top := ""
	for {
		_, err := os.Lstat(path)
		switch {
		case err == nil:
			return top, nil
		case !errors.Is(err, fs.ErrNotExist):
			return "", err
		}
		top = path
		parent := filepath.Dir(path)
		if parent == path {
			return top, nil
		}
		path = parent
	}
}

package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The format of audit state files (docs/audit.md, "The state file"). A
// reader refuses any other format or version.
const (
	StateFormat  = "tresor-audit-state"
	StateVersion = 1
)

// ErrStateUnusable is wrapped by the errors of a state file that cannot be
// used: truncated, corrupt, of another format or version, or written under
// another configuration. Nothing was audited then: keep the file for
// inspection and rerun a full audit.
var ErrStateUnusable = errors.New("audit state unusable")

// stateEnvelope is a state file: the format and version, read first, and
// the state with the SHA-256 of its bytes, so that a file cut short or
// altered by accident is refused instead of resumed. The checksum guards
// against accidents only: the file is trusted because the regulator keeps
// it (docs/audit.md).
type stateEnvelope struct {
	Format  string          `json:"format"`
	Version int             `json:"version"`
	SHA256  string          `json:"sha256"`
	State   json.RawMessage `json:"state"`
}

// WriteStateFile writes st to path atomically: a temporary file in the
// same directory, synced, renamed over path, and the directory synced, so
// that a crash leaves the old state or the new one, never half of one.
func WriteStateFile(path string, st *State) error {
	b, err := EncodeState(st)
	if err != nil {
		return err
	}
	return WriteStateBytes(path, b)
}

// EncodeState returns the bytes of a state file holding st.
func EncodeState(st *State) ([]byte, error) {
	body, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("audit: encode the state: %w", err)
	}
	// The envelope is written by hand: json.Marshal would copy and
	// re-validate the state's megabytes to embed them.
	sum := sha256.Sum256(body)
	b := fmt.Appendf(make([]byte, 0, len(body)+160), `{"format":%q,"version":%d,"sha256":"%x","state":`, StateFormat, StateVersion, sum)
	return append(append(b, body...), "}\n"...), nil
}

// WriteStateBytes writes b, EncodeState's, to path as WriteStateFile
// does: a caller may encode the state where it is consistent and write
// it on another goroutine.
func WriteStateBytes(path string, b []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("audit: write the state: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(b); err != nil {
		return fmt.Errorf("audit: write the state to %s: %w", f.Name(), err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("audit: sync the state %s: %w", f.Name(), err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("audit: close the state %s: %w", f.Name(), err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("audit: rename the state to %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("audit: sync the state's directory: %w", err)
	}
	defer d.Close()
	if err = d.Sync(); err != nil {
		return fmt.Errorf("audit: sync the state's directory %s: %w", dir, err)
	}
	return nil
}

// ReadStateFile reads a state file. A missing file is an error wrapping
// fs.ErrNotExist; a file that cannot be used one wrapping ErrStateUnusable.
func ReadStateFile(path string) (*State, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit: read the state: %w", err)
	}
	return DecodeState(b)
}

// DecodeState reads the bytes of a state file; its errors wrap
// ErrStateUnusable.
func DecodeState(b []byte) (*State, error) {
	unusable := func(format string, args ...any) (*State, error) {
		return nil, fmt.Errorf("%w: %s", ErrStateUnusable, fmt.Sprintf(format, args...))
	}
	var env stateEnvelope
	if err := json.Unmarshal(b, &env); err != nil {
		return unusable("truncated or corrupt (%v)", err)
	}
	switch {
	case env.Format != StateFormat:
		return unusable("format %q, want %q", env.Format, StateFormat)
	case env.Version != StateVersion:
		return unusable("format version %d; this tresor reads version %d only", env.Version, StateVersion)
	}
	if sum := sha256.Sum256(env.State); hex.EncodeToString(sum[:]) != env.SHA256 {
		return unusable("corrupt: its state hashes to %x, the file says %s", sum, env.SHA256)
	}
	var st State
	if err := json.Unmarshal(env.State, &st); err != nil {
		return unusable("corrupt state (%v)", err)
	}
	return &st, nil
}

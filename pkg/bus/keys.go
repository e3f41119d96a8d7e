package bus

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/agentbus/agentbus/pkg/errs"
)

// ErrUnusableKey is StoredKey's and AgreedKey's error when the key a
// bucket keeps is not size bytes of unpadded standard base64.
var ErrUnusableKey = errors.New("the stored key is unusable")

// StoredKey reads the random key of size bytes kv keeps under name
// (unpadded standard base64): errs.ErrNotFound when there is none,
// ErrUnusableKey when the value is not such a key.
func StoredKey(ctx context.Context, kv KV, name string, size int) ([]byte, error) {
	raw, _, err := kv.Get(ctx, name)
	if err != nil {
		if errors.Is(err, errs.ErrNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	k, err := base64.RawStdEncoding.DecodeString(string(raw))
	if err != nil || len(k) != size {
		return nil, fmt.Errorf("%s: %w", name, ErrUnusableKey)
	}
	return k, nil
}

// AgreedKey returns the random key of size bytes kv keeps under name, or
// stores a fresh one with create-if-absent, so that replicas starting
// together agree on one key. Its errors are StoredKey's, a failed store,
// or no agreement after three tries.
func AgreedKey(ctx context.Context, kv KV, name string, size int) ([]byte, error) {
	for range 3 {
		k, err := StoredKey(ctx, kv, name, size)
		if !errors.Is(err, errs.ErrNotFound) {
			return k, err
		}
		fresh := make([]byte, size)
		if _, err := rand.Read(fresh); err != nil {
			return nil, err
		}
		_, err = kv.Create(ctx, name, []byte(base64.RawStdEncoding.EncodeToString(fresh)))
		if err == nil {
			return fresh, nil
		}
		if !errors.Is(err, errs.ErrConflict) {
			return nil, fmt.Errorf("store %s: %w", name, err)
		}
	}
	return nil, fmt.Errorf("%s: no agreement on one key after three tries", name)
}

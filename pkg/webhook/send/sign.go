package send

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"
)

// SecretPrefix begins a Standard Webhooks secret: the rest is the key,
// base64-encoded.
const SecretPrefix = "whsec_"

// Key returns the HMAC key of a secret: a whsec_ secret's base64-decoded
// rest, or any other secret's bytes as they are.
func Key(secret string) ([]byte, error) {
	rest, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		if secret == "" {
			return nil, errors.New("empty secret")
		}
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil || len(key) == 0 {
		return nil, errors.New("a whsec_ secret must be followed by its key in standard base64")
	}
	return key, nil
}

// Signature is the webhook-signature header of a delivery under the
// Standard Webhooks scheme: "v1,<base64 HMAC-SHA256 of id.timestamp.body>"
// for each key, space-separated (current key first).
func Signature(keys [][]byte, id string, at time.Time, body []byte) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	sigs := make([]string, 0, len(keys))
	for _, k := range keys {
		mac := hmac.New(sha256.New, k)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(ts))
		mac.Write([]byte{'.'})
		mac.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(sigs, " ")
}

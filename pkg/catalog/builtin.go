package catalog

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"sync"

	"sigs.k8s.io/yaml"
)

// builtinFS holds the control-plane catalogue: agent and service
// registration commands, their events, and CommandRejected. None of its
// commands has a process rule; agentbus's built-in processors handle them.
//
//go:embed builtin
var builtinFS embed.FS

// Builtin returns the embedded control-plane catalogue directory.
func Builtin() fs.FS { sub, _ := fs.Sub(builtinFS, "builtin"); return sub }

// builtinCommands is the set of command types of the embedded catalogue.
var builtinCommands = sync.OnceValue(func() map[string]bool {
	raw, err := fs.ReadFile(Builtin(), "catalog.yaml")
	if err != nil {
		panic(err) // embedded: always there
	}
	var f file
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		panic(err)
	}
	types := map[string]bool{}
	for _, c := range f.Commands {
		types[c.Type] = true
	}
	return types
})

// DefaultTypes is how many accepts and how many produces entries the
// built-in registration schemas take (their maxItems).
const DefaultTypes = 64

// BuiltinLimits are the bounds of the built-in registration schemas that
// configuration sets.
type BuiltinLimits struct {
	// Types is the maxItems of accepts and of produces in RegisterAgent
	// and RegisterService; 0 keeps DefaultTypes.
	Types int
}

// registrationSchemas are the schemas BuiltinLimits bound.
var registrationSchemas = []string{"commands/register-agent/1.0.json", "commands/register-service/1.0.json"}

// BuiltinWith returns the built-in catalogue with its registration schemas
// bounded by l: the schemas served and enforced are the bounded ones.
func BuiltinWith(l BuiltinLimits) fs.FS {
	if l.Types <= 0 || l.Types == DefaultTypes {
		return Builtin()
	}
	o := overlay{FS: Builtin(), files: map[string][]byte{}}
	for _, p := range registrationSchemas {
		b, err := fs.ReadFile(o.FS, p)
		if err != nil {
			panic(err) // embedded: always there
		}
		o.files[p] = bytes.ReplaceAll(b, fmt.Appendf(nil, `"maxItems": %d,`, DefaultTypes), fmt.Appendf(nil, `"maxItems": %d,`, l.Types))
	}
	return o
}

// overlay is an FS whose files named in files have other contents.
type overlay struct {
	fs.FS
	files map[string][]byte
}

var _ fs.ReadFileFS = overlay{}

func (o overlay) Open(name string) (fs.File, error) {
	b, ok := o.files[name]
	if !ok {
		return o.FS.Open(name)
	}
	st, err := fs.Stat(o.FS, name)
	if err != nil {
		return nil, err
	}
	return &memFile{Reader: bytes.NewReader(b), info: memInfo{FileInfo: st, size: int64(len(b))}}, nil
}

func (o overlay) ReadFile(name string) ([]byte, error) {
	if b, ok := o.files[name]; ok {
		return bytes.Clone(b), nil
	}
	return fs.ReadFile(o.FS, name)
}

// memFile is a file of an overlay.
type memFile struct {
	*bytes.Reader
	info memInfo
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *memFile) Close() error               { return nil }

// memInfo is the replaced file's info with its new size.
type memInfo struct {
	fs.FileInfo
	size int64
}

func (i memInfo) Size() int64 { return i.size }

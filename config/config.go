// Package config embeds the example domain catalogue shipped with agentbus,
// used when no catalogue directory is configured. See catalog/README.md.
package config

import (
	"embed"
	"io/fs"
)

//go:embed catalog
var catalogFS embed.FS

// ExampleCatalog returns the embedded example catalogue directory.
func ExampleCatalog() fs.FS {
	sub, err := fs.Sub(catalogFS, "catalog")
	if err != nil {
		panic(err)
	}
	return sub
}

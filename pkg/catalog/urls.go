package catalog

// URLs builds the absolute URLs schema documents are served at: under
// Base (the public REST endpoint), with "/{tenant}" after it in
// multi-tenant mode.
type URLs struct {
	Base        string
	MultiTenant bool
}

// Schema is the absolute URL of an entry's schema document for tenant.
func (u URLs) Schema(tenant string, kind Kind, e *Entry) string {
	return u.Dir(tenant, kind) + e.Schema + "/" + e.Version
}

// Dir is the URL, with its trailing slash, under which tenant's schema
// documents of kind are served.
func (u URLs) Dir(tenant string, kind Kind) string {
	base := u.Base
	if u.MultiTenant {
		base += "/" + tenant
	}
	return base + "/" + string(kind) + "s/"
}

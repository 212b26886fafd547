package apps

import "testing"

// TestIngressRoute: a request goes to the path ingress-nginx picks: the
// host's rules only (a wildcard covers one label), Prefix by path
// elements, the longest path first, Exact before Prefix.
func TestIngressRoute(t *testing.T) {
	t.Parallel()

	routes := []Route{
		{Ingress: "root", Host: "matrix.example.org", Path: "/"},
		{Ingress: "client", Host: "matrix.example.org", Path: "/_matrix/client"},
		{Ingress: "exact", Host: "matrix.example.org", Path: "/_matrix/client", Exact: true},
		{Ingress: "wild", Host: "*.example.org", Path: "/"},
		{Ingress: "any", Path: "/any"},
	}
	for _, tc := range []struct{ host, path, want string }{
		{"matrix.example.org", "/_matrix/client/versions", "client"},
		{"matrix.example.org", "/_matrix/client", "exact"},
		{"matrix.example.org", "/_matrix/clientx", "root"},
		{"photos.example.org", "/", "wild"},
		{"a.b.example.org", "/", ""},
		{"example.org", "/any/thing", "any"},
		{"example.org", "/", ""},
	} {
		got := ""
		if r := route(routes, tc.host, tc.path); r != nil {
			got = r.Ingress
		}

		if got != tc.want {
			t.Errorf("%s%s -> %q, want %q", tc.host, tc.path, got, tc.want)
		}
	}
}

package migproxy

import (
	"crypto/tls"
	"testing"

	"github.com/crimux/crimux/internal/testutil/pkitest"
)

// testCA is a cluster CA made for one test (pkitest).
type testCA = pkitest.CA

func newCA(t *testing.T, name string) *testCA { return pkitest.NewCA(t, name) }

// node loads a fresh node of ca through LoadTLS.
func node(t *testing.T, ca *testCA) (server, client *tls.Config) {
	t.Helper()
	server, client, err := LoadTLS(ca.WriteNode(t))
	if err != nil {
		t.Fatal(err)
	}
	return server, client
}

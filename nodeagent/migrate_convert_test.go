package nodeagent

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

var testSeal = &vmv1.Seal{Certificates: [][]byte{{0x30, 0x82}, {0x30, 0x01}}, Signature: []byte{1, 2, 3}, SignedAtUnixNano: 1764979200123456789}

// throughAnnotation is v written to an annotation and read back into out.
func throughAnnotation(t *testing.T, v, out any) {
	t.Helper()
	s, err := kubeapi.EncodeAnnotation(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubeapi.DecodeAnnotation(map[string]string{"k": s}, "k", out); err != nil {
		t.Fatal(err)
	}
}

// TestMigrationDescriptionsKeepTheirSeal: a source's description and a
// target's answer cross the annotations whole, seal included: crimux
// refuses one without it.
func TestMigrationDescriptionsKeepTheirSeal(t *testing.T) {
	src := &vmv1.MigrationSource{DomainXml: "<domain/>", GuestMac: "52:54:00:00:00:01", ImageDigest: "sha256:ab", Seal: testSeal}
	var a kubeapi.MigrationSource
	throughAnnotation(t, sourceAnnotation("web-mig-abcde", src), &a)
	if got := sourceMessage(a); a.Target != "web-mig-abcde" || !proto.Equal(got, src) {
		t.Errorf("source through the annotation: %v (target %q); want %v", got, a.Target, src)
	}
	tgt := &vmv1.MigrationTarget{LibvirtUri: "qemu+tls://10.0.0.2/system", Address: "10.0.0.2:16515", Token: "0123456789abcdef0123456789abcdef",
		DomainXml: "<domain/>", DomainName: "crimux-vm--x", Disks: []string{"vda"}, Seal: testSeal}
	var b kubeapi.MigrationTarget
	throughAnnotation(t, targetAnnotation("ns/web", tgt), &b)
	if got := targetMessage(b); b.Source != "ns/web" || !proto.Equal(got, tgt) {
		t.Errorf("target through the annotation: %v (source %q); want %v", got, b.Source, tgt)
	}
	if sourceMessage(kubeapi.MigrationSource{}).GetSeal() != nil || targetMessage(kubeapi.MigrationTarget{}).GetSeal() != nil {
		t.Error("an unsealed description gained a seal")
	}
}

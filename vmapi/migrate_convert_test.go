package vmapi

import (
	"reflect"
	"testing"
	"time"

	"github.com/crimux/crimux/vmtypes"
)

// TestMigrationMessagesKeepTheSeal: the VM API carries a migration's
// descriptions whole, seal included, both ways.
func TestMigrationMessagesKeepTheSeal(t *testing.T) {
	seal := vmtypes.Seal{Certificates: [][]byte{{0x30, 0x82}}, Signature: []byte{7, 8}, SignedAt: time.Unix(0, 1764979200123456789)}
	src := vmtypes.MigrationSource{DomainXML: "<domain/>", GuestMAC: "52:54:00:00:00:01", ImageDigest: "sha256:ab", Seal: seal}
	if got := sourceFromProto(sourceToProto(src)); !reflect.DeepEqual(got, src) {
		t.Errorf("source through the VM API: %+v; want %+v", got, src)
	}
	tgt := vmtypes.MigrationTarget{LibvirtURI: "qemu+tls://h/system", Address: "h:1", Token: "t", DomainXML: "<domain/>",
		DomainName: "d", Disks: []string{"vda"}, Seal: seal}
	if got := targetFromProto(targetToProto(tgt)); !reflect.DeepEqual(got, tgt) {
		t.Errorf("target through the VM API: %+v; want %+v", got, tgt)
	}
	if got := sourceFromProto(sourceToProto(vmtypes.MigrationSource{})); len(got.Seal.Signature) != 0 {
		t.Errorf("an unsealed source gained a seal: %+v", got.Seal)
	}
}

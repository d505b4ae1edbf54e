package cloudinit

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var testMounts = []Mount{{Tag: "data", Path: "/data"}, {Tag: "etc-app", Path: "/etc/app", ReadOnly: true}}

// TestMountsInVendorData: a VM with shares gets vendor-data whose bootcmd
// mounts each at its container path, read-only where it is, with the
// path as an argument (never shell text).
func TestMountsInVendorData(t *testing.T) {
	f, err := Build(Input{InstanceID: "uid", Mounts: testMounts})
	if err != nil {
		t.Fatal(err)
	}
	vd := string(f["vendor-data"])
	if !strings.HasPrefix(vd, "#cloud-config\n") {
		t.Fatalf("vendor-data:\n%s", vd)
	}
	var doc struct{ Bootcmd [][]string }
	if err := yaml.Unmarshal(f["vendor-data"], &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Bootcmd) != 2 || strings.Join(doc.Bootcmd[1][3:], " ") != "crimux-mount etc-app /etc/app ro" ||
		strings.Join(doc.Bootcmd[0][3:], " ") != "crimux-mount data /data rw" || doc.Bootcmd[0][2] != mountScript {
		t.Fatalf("bootcmd: %q", doc.Bootcmd)
	}
	if g, _ := Build(Input{InstanceID: "uid"}); g["vendor-data"] != nil {
		t.Fatal("vendor-data without shares")
	}
}

// TestMountsMergedIntoUserBootcmd: a cloud-config user-data with its own
// bootcmd (which replaces vendor-data's) gets the mounts first in it; one
// without keeps its text.
func TestMountsMergedIntoUserBootcmd(t *testing.T) {
	f, err := Build(Input{InstanceID: "uid", Mounts: testMounts, UserData: []byte("#cloud-config\nbootcmd:\n  - echo mine\n")})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Bootcmd []any }
	if err := yaml.Unmarshal(f["user-data"], &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Bootcmd) != 3 || doc.Bootcmd[2] != "echo mine" {
		t.Fatalf("user bootcmd: %#v", doc.Bootcmd)
	}
	plain := "#cloud-config\npackages: [htop]\n"
	if g, _ := Build(Input{InstanceID: "uid", Mounts: testMounts, UserData: []byte(plain)}); string(g["user-data"]) != plain {
		t.Fatalf("user-data without bootcmd changed:\n%s", g["user-data"])
	}
}

package vm

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func baseSpec() Spec {
	return Spec{
		Name: DomainName("vm--c0ffee"), UUID: "6f1c0c4e-8a5e-4b5c-9a7e-1f2d3c4b5a69",
		Meta: Metadata{Instance: "node-1", PodUID: "uid-1", PodName: "web", PodNamespace: "default",
			SandboxID: "vm--5a5a", ContainerID: "vm--c0ffee"},
		VCPUs: 2, MemoryMiB: 256, Accel: AccelTCG, Emulator: "/usr/lib/crimux/qemu-wrapper",
		Console: Console{Socket: "/var/lib/crimux/vms/c0ffee/console.sock", Log: "/var/lib/crimux/vms/c0ffee/console.log"},
	}
}

func TestDomainGolden(t *testing.T) {
	cases := map[string]func(*Spec){
		"kernel-boot-tcg": func(s *Spec) {
			s.Boot = &KernelBoot{Kernel: "/k/vmlinuz", Initrd: "/k/initrd.img", Args: "console=ttyS0 quiet"}
		},
		"disk-boot-kvm": func(s *Spec) {
			s.Accel = AccelKVM
			s.Disk = &Disk{Path: "/var/lib/crimux/vms/c0ffee/overlay.qcow2", Format: "qcow2"}
		},
		"disk-boot-cidata": func(s *Spec) {
			s.Disk = &Disk{Path: "/var/lib/crimux/vms/c0ffee/disk.qcow2", Format: "qcow2",
				Backing: &Disk{Path: "/var/lib/crimux/images/sha256-ab/disk.qcow2", Format: "raw"}}
			s.CIData = "/var/lib/crimux/vms/c0ffee/cidata.iso"
		},
		// qemu runs as the VM's own identity, and the overlay's
		// backing chain is named in full (never read from its header).
		"disk-boot-own-identity": func(s *Spec) {
			s.Disk = &Disk{Path: "/var/lib/crimux/pods/5a5a/disk.qcow2", Format: "qcow2",
				Backing: &Disk{Path: "/var/lib/crimux/images/sha256-ab/disk.qcow2", Format: "qcow2"}}
			s.CIData = "/var/lib/crimux/vms/c0ffee/cidata.iso"
			s.Identity = &Identity{UID: 1879048193, GID: 1879048193}
		},
		"disk-boot-resizable-kvm": func(s *Spec) { // room for 4 vCPUs and 1 GiB
			s.Accel = AccelKVM
			s.Disk = &Disk{Path: "/var/lib/crimux/vms/c0ffee/overlay.qcow2", Format: "qcow2"}
			s.MaxVCPUs, s.MaxMemoryMiB = 4, 1024
		},
		"disk-boot-resizable-shared": func(s *Spec) { // memory only, with virtio-fs shares
			s.Disk = &Disk{Path: "/var/lib/crimux/vms/c0ffee/overlay.qcow2", Format: "qcow2"}
			s.MaxVCPUs, s.MaxMemoryMiB, s.SharedMemory = 2, 511, true
		},
		"disk-boot-hugepages-shared": func(s *Spec) { // 2 MiB pages, virtio-fs shares, vCPUs resizable
			s.Disk = &Disk{Path: "/var/lib/crimux/vms/c0ffee/overlay.qcow2", Format: "qcow2"}
			s.MaxVCPUs, s.HugePageKiB, s.SharedMemory = 2, 2048, true
		},
		"kernel-and-disk": func(s *Spec) {
			s.Boot = &KernelBoot{Kernel: "/k/vmlinuz", Initrd: "/k/initrd.img", Args: "console=ttyS0 root=/dev/vda"}
			s.Disk = &Disk{Path: "/o.qcow2", Format: "qcow2"}
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			s := baseSpec()
			mutate(&s)
			got, err := DomainXML(s)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".xml")
			if *update {
				if err := os.WriteFile(golden, []byte(got+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if got+"\n" != string(want) {
				t.Errorf("domain XML differs from %s (go test -update rewrites it):\n%s", golden, got)
			}
		})
	}
}

func TestDomainRejects(t *testing.T) {
	cases := map[string]func(*Spec){
		"no disk nor kernel": func(s *Spec) {},
		"auto accel":         func(s *Spec) { s.Accel = "auto"; s.Disk = &Disk{Path: "/d", Format: "raw"} },
		"bad disk format":    func(s *Spec) { s.Disk = &Disk{Path: "/d", Format: "vmdk"} },
		"no console":         func(s *Spec) { s.Disk = &Disk{Path: "/d", Format: "raw"}; s.Console = Console{} },
		"zero memory":        func(s *Spec) { s.Disk = &Disk{Path: "/d", Format: "raw"}; s.MemoryMiB = 0 },
		"max vcpus too many": func(s *Spec) { s.Disk = &Disk{Path: "/d", Format: "raw"}; s.MaxVCPUs = MaxVCPUs + 1 },
		"resizable huge pages": func(s *Spec) {
			s.Disk = &Disk{Path: "/d", Format: "raw"}
			s.HugePageKiB, s.MaxMemoryMiB = 2048, 2*s.MemoryMiB
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			s := baseSpec()
			mutate(&s)
			if _, err := Domain(s); err == nil {
				t.Fatal("Domain accepted a bad spec")
			}
		})
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	s := baseSpec()
	s.Disk = &Disk{Path: "/d", Format: "raw"}
	d, err := Domain(s)
	if err != nil {
		t.Fatal(err)
	}
	xmlText, _ := d.Marshal()
	var back = *d
	if err := back.Unmarshal(xmlText); err != nil {
		t.Fatal(err)
	}
	m, ok := ParseMetadata(&back)
	if !ok {
		t.Fatalf("metadata not found in\n%s", xmlText)
	}
	m.XMLName = s.Meta.XMLName
	if m != s.Meta {
		t.Fatalf("metadata round trip: got %+v, want %+v", m, s.Meta)
	}
}

// TestIdentityAndChainRefusals: root is never a VM's identity, and an
// image's disk never has a backing file of its own.
func TestIdentityAndChainRefusals(t *testing.T) {
	for name, mutate := range map[string]func(*Spec){
		"root uid": func(s *Spec) { s.Identity = &Identity{UID: 0, GID: 5} },
		"root gid": func(s *Spec) { s.Identity = &Identity{UID: 5, GID: 0} },
		"chained backing": func(s *Spec) {
			s.Disk.Backing = &Disk{Path: "/b", Format: "qcow2", Backing: &Disk{Path: "/c", Format: "raw"}}
		},
		"backing format": func(s *Spec) { s.Disk.Backing = &Disk{Path: "/b", Format: "vmdk"} },
	} {
		t.Run(name, func(t *testing.T) {
			s := baseSpec()
			s.Disk = &Disk{Path: "/o.qcow2", Format: "qcow2"}
			mutate(&s)
			if _, err := DomainXML(s); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

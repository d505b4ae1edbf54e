package virt

import (
	"encoding/xml"
	"fmt"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/crimux/crimux/internal/errdefs"
)

// memoryDevices is what PluggedMemory reads of a domain's live XML.
// libvirtxml has no <current> (what the guest plugged) yet.
type memoryDevices struct {
	Devices struct {
		Memory []struct {
			Model  string `xml:"model,attr"`
			Target struct {
				Size      sizedValue `xml:"size"`
				Requested sizedValue `xml:"requested"`
				Current   sizedValue `xml:"current"`
			} `xml:"target"`
		} `xml:"memory"`
	} `xml:"devices"`
}

type sizedValue struct {
	Value uint64 `xml:",chardata"`
	Unit  string `xml:"unit,attr"`
}

// mib converts a libvirt size to MiB (libvirt writes KiB).
func (v sizedValue) mib() (uint64, error) {
	switch v.Unit {
	case "", "KiB", "k", "K":
		return v.Value >> 10, nil
	case "MiB", "M":
		return v.Value, nil
	case "GiB", "G":
		return v.Value << 10, nil
	case "b", "bytes":
		return v.Value >> 20, nil
	}
	return 0, fmt.Errorf("size unit %q", v.Unit)
}

// parsePluggedMemory reads the virtio-mem device of a domain's XML.
func parsePluggedMemory(domainXML string) (MemoryPlug, bool, error) {
	var d memoryDevices
	if err := xml.Unmarshal([]byte(domainXML), &d); err != nil {
		return MemoryPlug{}, false, fmt.Errorf("domain XML: %w", err)
	}
	for _, m := range d.Devices.Memory {
		if m.Model != "virtio-mem" {
			continue
		}
		var p MemoryPlug
		var err error
		for _, f := range []struct {
			v   sizedValue
			out *uint64
		}{{m.Target.Size, &p.SizeMiB}, {m.Target.Requested, &p.RequestedMiB}, {m.Target.Current, &p.CurrentMiB}} {
			if *f.out, err = f.v.mib(); err != nil {
				return MemoryPlug{}, false, err
			}
		}
		return p, true, nil
	}
	return MemoryPlug{}, false, nil
}

func (r remote) PluggedMemory(d Domain) (MemoryPlug, bool, error) {
	x, err := r.XML(d)
	if err != nil {
		return MemoryPlug{}, false, err
	}
	return parsePluggedMemory(x)
}

// withRequestedMemory is the virtio-mem device of a domain's XML with its
// requested size set to requestedMiB, as device XML.
func withRequestedMemory(domainXML string, requestedMiB uint64) (string, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(domainXML); err != nil {
		return "", fmt.Errorf("domain XML: %w", err)
	}
	if d.Devices != nil {
		for _, m := range d.Devices.Memorydevs {
			if m.Model != "virtio-mem" || m.Target == nil {
				continue
			}
			m.Target.Requested = &libvirtxml.DomainMemorydevTargetRequested{Value: uint(requestedMiB), Unit: "MiB"}
			return m.Marshal()
		}
	}
	return "", fmt.Errorf("domain %s has no virtio-mem device: %w", d.Name, errdefs.ErrFailedPrecondition)
}

// GuestMemory reads the domain's balloon statistics without waiting for a
// job the domain may be in (NOWAIT: libvirt then reports only the
// balloon's size, which is ok == false here).
func (r remote) GuestMemory(d Domain) (GuestMemory, bool, error) {
	recs, err := r.l.ConnectGetAllDomainStats([]golibvirt.Domain{dom(d)}, uint32(golibvirt.DomainStatsBalloon),
		uint32(golibvirt.ConnectGetAllDomainsStatsNowait))
	if err != nil {
		return GuestMemory{}, false, classify(err)
	}
	if len(recs) == 0 {
		return GuestMemory{}, false, nil
	}
	m, ok := parseGuestMemory(recs[0].Params)
	return m, ok, nil
}

// IO reads the domain's block and interface statistics, without waiting
// for a job the domain may be in.
func (r remote) IO(d Domain) (IO, error) {
	recs, err := r.l.ConnectGetAllDomainStats([]golibvirt.Domain{dom(d)},
		uint32(golibvirt.DomainStatsBlock|golibvirt.DomainStatsInterface), uint32(golibvirt.ConnectGetAllDomainsStatsNowait))
	if err != nil || len(recs) == 0 {
		return IO{}, classify(err)
	}
	return parseIO(recs[0].Params), nil
}

// parseIO sums block.<n>.rd.bytes, block.<n>.wr.bytes, net.<n>.rx.bytes
// and net.<n>.tx.bytes over every disk and NIC.
func parseIO(params []golibvirt.TypedParam) IO {
	var io IO
	for _, p := range params {
		v, ok := p.Value.I.(uint64)
		if !ok {
			continue
		}
		switch kind, field, _ := splitStat(p.Field); {
		case kind == "block" && field == "rd.bytes":
			io.BlockReadBytes += v
		case kind == "block" && field == "wr.bytes":
			io.BlockWriteBytes += v
		case kind == "net" && field == "rx.bytes":
			io.NetReceiveBytes += v
		case kind == "net" && field == "tx.bytes":
			io.NetSendBytes += v
		}
	}
	return io
}

// splitStat splits "block.0.rd.bytes" into "block", "rd.bytes" and the
// device's index "0".
func splitStat(name string) (kind, field, index string) {
	parts := strings.SplitN(name, ".", 3)
	if len(parts) < 3 {
		return "", "", ""
	}
	return parts[0], parts[2], parts[1]
}

// parseGuestMemory reads the balloon.* statistics (KiB) the guest last
// reported; ok is false when it reported none, or figures that do not
// hold together (usable or unused above the total).
func parseGuestMemory(params []golibvirt.TypedParam) (GuestMemory, bool) {
	kib := map[string]uint64{}
	for _, p := range params {
		if v, ok := p.Value.I.(uint64); ok {
			kib[p.Field] = v
		}
	}
	m := GuestMemory{TotalBytes: kib[golibvirt.DomainStatsBalloonAvailable] << 10,
		UsableBytes: kib[golibvirt.DomainStatsBalloonUsable] << 10, UnusedBytes: kib[golibvirt.DomainStatsBalloonUnused] << 10}
	_, hasUsable := kib[golibvirt.DomainStatsBalloonUsable]
	ok := kib[golibvirt.DomainStatsBalloonLastUpdate] > 0 && hasUsable && m.TotalBytes > 0 &&
		m.UsableBytes <= m.TotalBytes && m.UnusedBytes <= m.TotalBytes
	return m, ok
}

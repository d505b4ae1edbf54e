package vmapi

import (
	"time"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/vmtypes"
)

// The migration's descriptions, between the VM API's messages and the
// runtimes' types: every field, the seal included (a description
// missing one is refused by the node that opens it).

func sourceToProto(s vmtypes.MigrationSource) *vmv1.MigrationSource {
	return &vmv1.MigrationSource{DomainXml: s.DomainXML, GuestMac: s.GuestMAC, ImageDigest: s.ImageDigest, Seal: sealToProto(s.Seal)}
}

func sourceFromProto(s *vmv1.MigrationSource) vmtypes.MigrationSource {
	return vmtypes.MigrationSource{DomainXML: s.GetDomainXml(), GuestMAC: s.GetGuestMac(), ImageDigest: s.GetImageDigest(),
		Seal: sealFromProto(s.GetSeal())}
}

func targetToProto(t vmtypes.MigrationTarget) *vmv1.MigrationTarget {
	return &vmv1.MigrationTarget{LibvirtUri: t.LibvirtURI, Address: t.Address, Token: t.Token, DomainXml: t.DomainXML,
		DomainName: t.DomainName, Disks: t.Disks, Seal: sealToProto(t.Seal)}
}

func targetFromProto(t *vmv1.MigrationTarget) vmtypes.MigrationTarget {
	return vmtypes.MigrationTarget{LibvirtURI: t.GetLibvirtUri(), Address: t.GetAddress(), Token: t.GetToken(),
		DomainXML: t.GetDomainXml(), DomainName: t.GetDomainName(), Disks: t.GetDisks(), Seal: sealFromProto(t.GetSeal())}
}

func sealToProto(s vmtypes.Seal) *vmv1.Seal {
	if len(s.Signature) == 0 {
		return nil
	}
	return &vmv1.Seal{Certificates: s.Certificates, Signature: s.Signature, SignedAtUnixNano: s.SignedAt.UnixNano()}
}

func sealFromProto(s *vmv1.Seal) vmtypes.Seal {
	if s == nil {
		return vmtypes.Seal{}
	}
	return vmtypes.Seal{Certificates: s.GetCertificates(), Signature: s.GetSignature(), SignedAt: time.Unix(0, s.GetSignedAtUnixNano())}
}

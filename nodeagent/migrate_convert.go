package nodeagent

import (
	"github.com/crimux/crimux/kubeapi"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// The migration's descriptions between the VM API's messages and the
// annotations' JSON: every field, the seal included. crimux refuses a
// description whose seal is missing or does not match it.

func sourceAnnotation(target string, s *vmv1.MigrationSource) kubeapi.MigrationSource {
	return kubeapi.MigrationSource{Target: target, DomainXML: s.GetDomainXml(), GuestMAC: s.GetGuestMac(),
		ImageDigest: s.GetImageDigest(), Seal: sealAnnotation(s.GetSeal())}
}

func sourceMessage(s kubeapi.MigrationSource) *vmv1.MigrationSource {
	return &vmv1.MigrationSource{DomainXml: s.DomainXML, GuestMac: s.GuestMAC, ImageDigest: s.ImageDigest, Seal: sealMessage(s.Seal)}
}

func targetAnnotation(source string, t *vmv1.MigrationTarget) kubeapi.MigrationTarget {
	return kubeapi.MigrationTarget{Source: source, LibvirtURI: t.GetLibvirtUri(), Address: t.GetAddress(), Token: t.GetToken(),
		DomainXML: t.GetDomainXml(), DomainName: t.GetDomainName(), Disks: t.GetDisks(), Seal: sealAnnotation(t.GetSeal())}
}

func targetMessage(t kubeapi.MigrationTarget) *vmv1.MigrationTarget {
	return &vmv1.MigrationTarget{LibvirtUri: t.LibvirtURI, Address: t.Address, Token: t.Token, DomainXml: t.DomainXML,
		DomainName: t.DomainName, Disks: t.Disks, Seal: sealMessage(t.Seal)}
}

func sealAnnotation(s *vmv1.Seal) *kubeapi.Seal {
	if s == nil {
		return nil
	}
	return &kubeapi.Seal{Certificates: s.GetCertificates(), Signature: s.GetSignature(), SignedAtUnixNano: s.GetSignedAtUnixNano()}
}

func sealMessage(s *kubeapi.Seal) *vmv1.Seal {
	if s == nil {
		return nil
	}
	return &vmv1.Seal{Certificates: s.Certificates, Signature: s.Signature, SignedAtUnixNano: s.SignedAtUnixNano}
}

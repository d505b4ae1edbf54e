package migproxy

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadTLSNamesTheMissingFile(t *testing.T) {
	dir := newCA(t, "cluster").WriteNode(t)
	if _, _, err := LoadTLS(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{caFile, serverKeyFile, clientCertFile} {
		t.Run(name, func(t *testing.T) {
			broken := t.TempDir()
			for _, f := range []string{caFile, serverCertFile, serverKeyFile, clientCertFile, clientKeyFile} {
				if f == name {
					continue
				}
				data, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(broken, f), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if _, _, err := LoadTLS(broken); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("LoadTLS without %s: %v", name, err)
			}
		})
	}
}

func TestLoadTLSConfigs(t *testing.T) {
	server, client := node(t, newCA(t, "cluster"))
	if server.ClientAuth != tls.RequireAndVerifyClientCert || server.ClientCAs == nil ||
		server.MinVersion != tls.VersionTLS13 || len(server.Certificates) != 1 {
		t.Errorf("server config: %+v", server)
	}
	if client.RootCAs == nil || client.MinVersion != tls.VersionTLS13 || len(client.Certificates) != 1 {
		t.Errorf("client config: %+v", client)
	}
}

func TestListenRequiresClientCertificates(t *testing.T) {
	server, _ := node(t, newCA(t, "cluster"))
	lax := server.Clone()
	lax.ClientAuth = tls.VerifyClientCertIfGiven
	if l, err := Listen("127.0.0.1:0", lax, nil); err == nil {
		l.Close()
		t.Error("Listen took a config that does not require client certificates")
	}
}

func TestStartRefuses(t *testing.T) {
	_, client := node(t, newCA(t, "cluster"))
	sock := filepath.Join(shortDir(t), "mem.sock")
	ok := Forward{Token: NewToken(), Target: "127.0.0.1:1", Client: client, Channels: map[string]string{"mem": sock}}
	open := shortDir(t)
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*Forward){
		"bad token":         func(f *Forward) { f.Token = "xyz" },
		"no target":         func(f *Forward) { f.Target = "" },
		"no client config":  func(f *Forward) { f.Client = nil },
		"no channels":       func(f *Forward) { f.Channels = nil },
		"bad channel":       func(f *Forward) { f.Channels = map[string]string{"m em": sock} },
		"relative path":     func(f *Forward) { f.Channels = map[string]string{"mem": "mem.sock"} },
		"writable dir":      func(f *Forward) { f.Channels = map[string]string{"mem": filepath.Join(open, "mem.sock")} },
		"socket file taken": func(f *Forward) { os.WriteFile(sock, nil, 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			f := ok
			change(&f)
			if fw, err := Start(f); err == nil {
				fw.Close()
				t.Error("Start succeeded")
			}
		})
	}
}

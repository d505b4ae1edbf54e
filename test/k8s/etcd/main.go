// Command etcd is the test bed cluster's etcd: etcd's own server (its embed
// package, go.etcd.io/etcd/server/v3) with the few settings a one-node,
// loopback-only cluster needs, so the test bed builds it from the module
// proxy like kube-apiserver instead of downloading a release.
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "the member's data directory")
	client := flag.String("listen-client-url", "http://127.0.0.1:23790", "where clients (kube-apiserver) connect")
	peer := flag.String("listen-peer-url", "http://127.0.0.1:23800", "the (unused) peer URL")
	flag.Parse()
	if *dataDir == "" {
		log.Fatal("etcd: --data-dir is required")
	}
	cfg := embed.NewConfig()
	cfg.Name = "crimux-testbed"
	cfg.Dir = *dataDir
	cfg.LogLevel = "warn"
	cu, err := url.Parse(*client)
	if err != nil {
		log.Fatalf("etcd: --listen-client-url: %v", err)
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		log.Fatalf("etcd: --listen-peer-url: %v", err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	// A test bed's etcd: small, and no fsync per write (tmpfs-like speed on
	// a loaded 2-core machine; the data is thrown away with the bed).
	cfg.UnsafeNoFsync = true
	cfg.QuotaBackendBytes = 512 << 20

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd: %v", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		log.Printf("etcd: serving %s", cu)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		log.Fatal("etcd: not ready after 60s")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	case <-sig:
	}
}

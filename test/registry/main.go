// Command registry is the test bed's read-only OCI distribution registry. It
// serves the OCI image layouts under -root (one per repository:
// ROOT/<repository>/{oci-layout,index.json,blobs/sha256/...}, as written by
// test/images) over plain HTTP, standard library only.
//
// It implements the pull side of the distribution API: GET /v2/, GET and
// HEAD of manifests (by tag or digest) and blobs (by digest, with ranges),
// tags/list and _catalog. Every other method gets 405. The registry host is
// ignored: containerd's mirror requests carry ?ns=<upstream host> and are
// answered from the same repository path, so registry.k8s.io/pause,
// k8s.gcr.io/pause and 127.0.0.1:5117/pause are all ROOT/pause.
//
// Layouts are read on every request, so rebuilt images are served without a
// restart.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
)

const refNameAnnotation = "org.opencontainers.image.ref.name"

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)
	tagRE    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	digestRE = regexp.MustCompile(`^sha256:([a-f0-9]{64})$`)
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type layoutIndex struct {
	Manifests []descriptor `json:"manifests"`
}

type server struct {
	root string
}

func main() {
	addr := flag.String("addr", "127.0.0.1:5117", "listen address")
	root := flag.String("root", "/opt/crimux-testbed/images", "directory of OCI image layouts, one per repository")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("registry: %v", err)
	}
	s := &server{root: *root}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdownCtx)
	}()
	log.Printf("registry: serving %s on http://%s", *root, ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("registry: %v", err)
	}
	log.Printf("registry: stopped")
}

// statusWriter records the status for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	start := time.Now()
	s.route(sw, r)
	log.Printf("%s %s %d %s", r.Method, r.URL.RequestURI(), sw.status, time.Since(start).Round(time.Microsecond))
}

func (s *server) route(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		apiError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "this registry is read-only")
		return
	}
	p := r.URL.Path
	switch {
	case p == "/v2/" || p == "/v2":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, "{}")
		return
	case p == "/v2/_catalog":
		s.catalog(w)
		return
	case !strings.HasPrefix(p, "/v2/"):
		apiError(w, http.StatusNotFound, "NOT_FOUND", "not a registry API path")
		return
	}
	rest := strings.TrimPrefix(p, "/v2/")
	for _, kind := range []string{"/manifests/", "/blobs/", "/tags/list"} {
		i := strings.LastIndex(rest, kind)
		if i <= 0 {
			continue
		}
		name, ref := rest[:i], rest[i+len(kind):]
		if !nameRE.MatchString(name) {
			apiError(w, http.StatusBadRequest, "NAME_INVALID", "invalid repository name")
			return
		}
		switch kind {
		case "/manifests/":
			s.manifest(w, r, name, ref)
		case "/blobs/":
			s.blob(w, r, name, ref)
		default:
			if ref != "" {
				break
			}
			s.tags(w, name)
		}
		return
	}
	apiError(w, http.StatusNotFound, "NOT_FOUND", "unknown registry API path")
}

func apiError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"errors": []map[string]string{{"code": code, "message": message}},
	})
}

func (s *server) layoutDir(name string) string {
	return filepath.Join(s.root, filepath.FromSlash(name))
}

func (s *server) readIndex(name string) (*layoutIndex, error) {
	dir := s.layoutDir(name)
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, err
	}
	var idx layoutIndex
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("%s/index.json: %w", name, err)
	}
	return &idx, nil
}

func (s *server) manifest(w http.ResponseWriter, r *http.Request, name, ref string) {
	idx, err := s.readIndex(name)
	if err != nil {
		apiError(w, http.StatusNotFound, "NAME_UNKNOWN", "repository "+name+" not known to this registry")
		return
	}
	var desc *descriptor
	switch {
	case digestRE.MatchString(ref):
		for i := range idx.Manifests {
			if idx.Manifests[i].Digest == ref {
				desc = &idx.Manifests[i]
				break
			}
		}
		if desc == nil {
			// A manifest that an index in this layout points to
			// (a platform manifest of a multi-platform image).
			data, err := os.ReadFile(s.blobPath(name, ref))
			if err != nil {
				break
			}
			var m struct {
				MediaType string `json:"mediaType"`
			}
			if json.Unmarshal(data, &m) != nil || m.MediaType == "" {
				break
			}
			desc = &descriptor{MediaType: m.MediaType, Digest: ref, Size: int64(len(data))}
		}
	case tagRE.MatchString(ref):
		for i := range idx.Manifests {
			if idx.Manifests[i].Annotations[refNameAnnotation] == ref {
				desc = &idx.Manifests[i]
				break
			}
		}
	default:
		apiError(w, http.StatusBadRequest, "MANIFEST_INVALID", "invalid tag or digest")
		return
	}
	if desc == nil {
		apiError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", "manifest "+name+":"+ref+" unknown")
		return
	}
	s.serveBlob(w, r, name, desc.Digest, desc.MediaType, "MANIFEST_UNKNOWN")
}

func (s *server) blob(w http.ResponseWriter, r *http.Request, name, digest string) {
	if !digestRE.MatchString(digest) {
		apiError(w, http.StatusBadRequest, "DIGEST_INVALID", "invalid digest")
		return
	}
	if _, err := s.readIndex(name); err != nil {
		apiError(w, http.StatusNotFound, "NAME_UNKNOWN", "repository "+name+" not known to this registry")
		return
	}
	s.serveBlob(w, r, name, digest, "application/octet-stream", "BLOB_UNKNOWN")
}

func (s *server) blobPath(name, digest string) string {
	return filepath.Join(s.layoutDir(name), "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

func (s *server) serveBlob(w http.ResponseWriter, r *http.Request, name, digest, mediaType, unknownCode string) {
	f, err := os.Open(s.blobPath(name, digest))
	if err != nil {
		apiError(w, http.StatusNotFound, unknownCode, digest+" unknown in "+name)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		apiError(w, http.StatusNotFound, unknownCode, digest+" unknown in "+name)
		return
	}
	h := w.Header()
	h.Set("Content-Type", mediaType)
	h.Set("Docker-Content-Digest", digest)
	h.Set("Etag", `"`+digest+`"`)
	h.Set("Cache-Control", "max-age=31536000")
	// ServeContent handles HEAD, Range and Content-Length.
	http.ServeContent(w, r, "", time.Time{}, f)
}

func (s *server) tags(w http.ResponseWriter, name string) {
	idx, err := s.readIndex(name)
	if err != nil {
		apiError(w, http.StatusNotFound, "NAME_UNKNOWN", "repository "+name+" not known to this registry")
		return
	}
	tags := []string{}
	for _, d := range idx.Manifests {
		if t := d.Annotations[refNameAnnotation]; t != "" {
			tags = append(tags, t)
		}
	}
	sort.Strings(tags)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"name": name, "tags": tags})
}

func (s *server) catalog(w http.ResponseWriter) {
	repos := []string{}
	filepath.WalkDir(s.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && d.Name() == "blobs" {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "oci-layout" {
			if rel, err := filepath.Rel(s.root, filepath.Dir(p)); err == nil && rel != "." {
				repos = append(repos, filepath.ToSlash(rel))
			}
		}
		return nil
	})
	sort.Strings(repos)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"repositories": repos})
}

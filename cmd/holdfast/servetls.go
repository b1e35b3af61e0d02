package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/holdfast/holdfast/internal/tlsconf"
)

// serveTLSFlags are serve's TLS settings.
type serveTLSFlags struct {
	certFile, keyFile, clientCAFile, clientAuth string
	peerCertFile, peerKeyFile, peerCAFile       string
}

func (f *serveTLSFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.certFile, "tls-cert-file", "", "PEM certificate of the HTTP listener (REST, MCP, operations); with --tls-key-file it turns TLS on")
	fs.StringVar(&f.keyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&f.clientCAFile, "tls-client-ca-file", "", "PEM CA bundle the HTTP listener verifies client certificates against")
	fs.StringVar(&f.clientAuth, "tls-client-auth", "", `client certificates on the HTTP listener: "require" or "verify-if-given" (default "require" when --tls-client-ca-file is given)`)
	fs.StringVar(&f.peerCertFile, "peer-cert-file", "", "PEM node certificate for the links between nodes (Raft and node-to-node HTTPS); it must name this node")
	fs.StringVar(&f.peerKeyFile, "peer-key-file", "", "PEM private key of --peer-cert-file")
	fs.StringVar(&f.peerCAFile, "peer-ca-file", "", "PEM CA every node's certificate must be issued by")
}

// tlsSetup is the loaded TLS material of a node.
type tlsSetup struct {
	peer *tlsconf.Peer // nil without peer TLS
	api  *tlsconf.API  // nil: plain HTTP
	// sources are every loaded set of files, to watch and reload.
	sources []*tlsconf.Source
}

// certReloadInterval is how often certificate files are checked for changes.
const certReloadInterval = time.Second

// load checks the flags' combinations and loads every file once.
func (f *serveTLSFlags) load(log hclog.Logger) (*tlsSetup, error) {
	peerGiven := f.peerCertFile != "" || f.peerKeyFile != "" || f.peerCAFile != ""
	apiGiven := f.certFile != "" || f.keyFile != ""
	switch {
	case peerGiven && (f.peerCertFile == "" || f.peerKeyFile == "" || f.peerCAFile == ""):
		return nil, errors.New("--peer-cert-file, --peer-key-file and --peer-ca-file go together")
	case apiGiven && (f.certFile == "" || f.keyFile == ""):
		return nil, errors.New("--tls-cert-file and --tls-key-file go together")
	case (f.clientCAFile != "" || f.clientAuth != "") && !apiGiven && !peerGiven:
		return nil, errors.New("--tls-client-ca-file and --tls-client-auth need TLS on the HTTP listener (--tls-cert-file and --tls-key-file, or the peer flags)")
	}
	auth, err := tlsconf.ParseClientAuth(f.clientAuth)
	if err != nil {
		return nil, fmt.Errorf("--tls-client-auth: %w", err)
	}
	if auth == tlsconf.ClientAuthNone && f.clientCAFile != "" {
		auth = tlsconf.ClientAuthRequire
	}
	if auth != tlsconf.ClientAuthNone && f.clientCAFile == "" {
		return nil, fmt.Errorf("--tls-client-auth %s needs --tls-client-ca-file", auth)
	}
	s := &tlsSetup{}
	if peerGiven {
		p, err := tlsconf.NewPeer(tlsconf.Files{CertFile: f.peerCertFile, KeyFile: f.peerKeyFile, CAFile: f.peerCAFile}, log)
		if err != nil {
			return nil, err
		}
		s.peer = p
		s.sources = append(s.sources, p.Source())
	}
	if !apiGiven && !peerGiven {
		return s, nil
	}
	var cert *tlsconf.Source
	if apiGiven {
		var check tlsconf.Check
		if s.peer != nil {
			check = tlsconf.IssuedByPeerCA(s.peer)
		}
		if cert, err = tlsconf.NewSource("api", tlsconf.Files{CertFile: f.certFile, KeyFile: f.keyFile}, log, check); err != nil {
			return nil, err
		}
		s.sources = append(s.sources, cert)
	} else {
		log.Info("the HTTP listener serves TLS with the node certificate (--peer-cert-file), since nodes call each other over HTTPS")
		cert = s.peer.Source()
	}
	var clientCA *tlsconf.Source
	if f.clientCAFile != "" {
		if clientCA, err = tlsconf.NewSource("client CA", tlsconf.Files{CAFile: f.clientCAFile}, log, nil); err != nil {
			return nil, err
		}
		s.sources = append(s.sources, clientCA)
	}
	if s.api, err = tlsconf.NewAPI(cert, clientCA, auth, s.peer); err != nil {
		return nil, err
	}
	return s, nil
}

// watch reloads changed files every certReloadInterval until ctx ends.
func (s *tlsSetup) watch(ctx context.Context) {
	for _, src := range s.sources {
		go src.Watch(ctx, certReloadInterval)
	}
}

// reload re-reads every file now (SIGHUP).
func (s *tlsSetup) reload() {
	for _, src := range s.sources {
		_ = src.Reload() // a failure is logged and the old material kept
	}
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/holdfast/holdfast/internal/pki"
)

// caFileBase names the CA's files: holdfast-ca.pem and holdfast-ca-key.pem.
const caFileBase = "holdfast-ca"

const tlsUsage = `Usage:
  holdfast tls ca create [--dir DIR] [--days 1825] [--name "holdfast CA"]
  holdfast tls cert create --node-id ID [--hosts 127.0.0.1,localhost] [--dir DIR] [--ca FILE] [--ca-key FILE] [--days 365]
  holdfast tls cert create --client NAME [--dir DIR] [--ca FILE] [--ca-key FILE] [--days 365]

ca create    make a cluster CA: DIR/holdfast-ca.pem and DIR/holdfast-ca-key.pem
cert create  issue a certificate signed by the CA (by default the one in DIR):
             --node-id ID writes DIR/ID.pem and DIR/ID-key.pem, a node certificate
             for the node's API listener and its links to peers;
             --client NAME writes DIR/NAME.pem and DIR/NAME-key.pem, a client
             certificate for API listeners started with --tls-client-auth require

A certificate never outlives the CA that signs it. No file is ever
overwritten; private keys are written with mode 0600.
Run "holdfast tls ca create -h" or "holdfast tls cert create -h" for the flags.
`

// tlsCommand runs "holdfast tls VERB OBJECT [flags]".
func tlsCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, tlsUsage)
		return 0
	}
	if len(args) >= 2 {
		switch args[0] + " " + args[1] {
		case "ca create":
			return tlsCACreate(args[2:], stdout, stderr)
		case "cert create":
			return tlsCertCreate(args[2:], stdout, stderr)
		}
	}
	if len(args) > 0 {
		fmt.Fprintf(stderr, "holdfast tls: unknown command %q\n\n", strings.Join(args[:min(len(args), 2)], " "))
	}
	fmt.Fprint(stderr, tlsUsage)
	return 2
}

// tlsFlags is the flag set of one tls command, with the flags every tls
// command has.
type tlsFlags struct {
	*flag.FlagSet
	dir  string
	days int
}

// newTLSFlags returns the flag set of "holdfast tls COMMAND", with --dir and
// --days (defaulting to defaultDays) defined.
func newTLSFlags(command, synopsis string, defaultDays int, stderr io.Writer) *tlsFlags {
	f := &tlsFlags{FlagSet: flag.NewFlagSet("holdfast tls "+command, flag.ContinueOnError)}
	f.SetOutput(stderr)
	f.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s %s\n\n", f.Name(), synopsis)
		f.PrintDefaults()
	}
	f.StringVar(&f.dir, "dir", ".", "directory the files are written to, created (mode 0700) if missing")
	f.IntVar(&f.days, "days", defaultDays, fmt.Sprintf("lifetime in days, 1 to %d", pki.MaxDays))
	return f
}

// parse parses args. If the command ends here, done is true and code is
// its exit code: 0 for -h, 2 for a usage error (already reported).
func (f *tlsFlags) parse(args []string) (code int, done bool) {
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	if f.NArg() > 0 {
		return f.usageError("unexpected arguments: %s", strings.Join(f.Args(), " ")), true
	}
	if f.days < 1 || f.days > pki.MaxDays {
		return f.usageError("--days must be 1 to %d, not %d", pki.MaxDays, f.days), true
	}
	return 0, false
}

// given reports whether flag name was set on the command line.
func (f *tlsFlags) given(name string) bool {
	found := false
	f.Visit(func(fl *flag.Flag) { found = found || fl.Name == name })
	return found
}

// usageError reports a malformed command line and returns its exit code.
func (f *tlsFlags) usageError(format string, args ...any) int {
	fmt.Fprintf(f.Output(), "%s: %s\nRun \"%s -h\" for its flags.\n", f.Name(), fmt.Sprintf(format, args...), f.Name())
	return 2
}

// fail reports a failed command and returns its exit code.
func (f *tlsFlags) fail(err error) int {
	fmt.Fprintf(f.Output(), "%s: %v\n", f.Name(), err)
	return 1
}

// pairPaths returns the certificate and key paths for base in dir.
func pairPaths(dir, base string) (cert, key string) {
	return filepath.Join(dir, base+".pem"), filepath.Join(dir, base+"-key.pem")
}

// writePair writes kp as DIR/base.pem and DIR/base-key.pem and reports each
// file on stdout; what describes the certificate.
func (f *tlsFlags) writePair(stdout io.Writer, kp *pki.KeyPair, base, what string) error {
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	certPath, keyPath := pairPaths(f.dir, base)
	if err := kp.WriteFiles(certPath, keyPath); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %s, valid until %s\n", certPath, what, kp.Cert.NotAfter.UTC().Format(time.RFC3339))
	fmt.Fprintf(stdout, "wrote %s: private key of %s (mode %04o)\n", keyPath, certPath, pki.KeyFileMode)
	return nil
}

// tlsCACreate runs "holdfast tls ca create".
func tlsCACreate(args []string, stdout, stderr io.Writer) int {
	f := newTLSFlags("ca create", `[--dir DIR] [--days 1825] [--name "holdfast CA"]`, pki.DefaultCADays, stderr)
	name := f.String("name", pki.DefaultCAName, "the CA's common name")
	if code, done := f.parse(args); done {
		return code
	}
	if *name == "" {
		return f.usageError("--name must not be empty")
	}
	ca, err := pki.NewCA(*name, f.days)
	if err != nil {
		return f.fail(err)
	}
	if err := f.writePair(stdout, &ca.KeyPair, caFileBase, fmt.Sprintf("CA certificate %q", *name)); err != nil {
		return f.fail(err)
	}
	return 0
}

// tlsCertCreate runs "holdfast tls cert create".
func tlsCertCreate(args []string, stdout, stderr io.Writer) int {
	f := newTLSFlags("cert create", "(--node-id ID [--hosts HOSTS] | --client NAME) [--dir DIR] [--ca FILE] [--ca-key FILE] [--days 365]", pki.DefaultCertDays, stderr)
	nodeID := f.String("node-id", "", "issue a node certificate for this node id, written to DIR/ID.pem and DIR/ID-key.pem")
	client := f.String("client", "", "issue a client certificate with this name, written to DIR/NAME.pem and DIR/NAME-key.pem")
	hosts := f.String("hosts", "127.0.0.1,localhost", "comma-separated IP addresses and DNS names the node is reached at (node certificates only)")
	caCert := f.String("ca", "", "the CA certificate (default DIR/"+caFileBase+".pem)")
	caKey := f.String("ca-key", "", "the CA private key (default DIR/"+caFileBase+"-key.pem)")
	if code, done := f.parse(args); done {
		return code
	}
	isNode := f.given("node-id")
	if isNode == f.given("client") {
		return f.usageError("give exactly one of --node-id and --client")
	}
	if !isNode && f.given("hosts") {
		return f.usageError("--hosts applies only to node certificates")
	}
	var nameErr error
	if isNode {
		nameErr = pki.ValidateNodeID(*nodeID)
	} else {
		nameErr = pki.ValidateClientName(*client)
	}
	if nameErr != nil {
		return f.usageError("%v", nameErr)
	}
	defaultCert, defaultKey := pairPaths(f.dir, caFileBase)
	if *caCert == "" {
		*caCert = defaultCert
	}
	if *caKey == "" {
		*caKey = defaultKey
	}
	ca, err := pki.LoadCA(*caCert, *caKey)
	if err != nil {
		return f.fail(err)
	}
	base, kp := *client, (*pki.KeyPair)(nil)
	if isNode {
		base = *nodeID
		kp, err = ca.IssueNode(base, splitHosts(*hosts), f.days)
	} else {
		kp, err = ca.IssueClient(base, f.days)
	}
	if err != nil {
		return f.fail(err)
	}
	what := "client certificate for " + base
	if isNode {
		what = fmt.Sprintf("node certificate for %s (hosts %s)", base, certHosts(kp))
	}
	if err := f.writePair(stdout, kp, base, what); err != nil {
		return f.fail(err)
	}
	return 0
}

// splitHosts splits a --hosts list at commas, keeping empty entries so that
// they are refused rather than silently dropped.
func splitHosts(s string) []string {
	hosts := strings.Split(s, ",")
	for i, h := range hosts {
		hosts[i] = strings.TrimSpace(h)
	}
	return hosts
}

// certHosts lists the IP addresses and DNS names a certificate names.
func certHosts(kp *pki.KeyPair) string {
	var hosts []string
	for _, ip := range kp.Cert.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	hosts = append(hosts, kp.Cert.DNSNames...)
	return strings.Join(hosts, ", ")
}

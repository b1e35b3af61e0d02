package pki

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// maxDNSNameLen is the longest DNS name, in its text form without a
// trailing dot.
const maxDNSNameLen = 253

// parseHost reads one host of a node certificate: an IP address (returned
// as ip) or else a DNS name (returned lower-cased as name).
func parseHost(h string) (ip net.IP, name string, err error) {
	if h == "" {
		return nil, "", errors.New("empty host (a stray comma?)")
	}
	if addr, err := netip.ParseAddr(h); err == nil {
		if addr.Zone() != "" {
			return nil, "", fmt.Errorf("host %q: an IP address in a certificate cannot have a zone", h)
		}
		return net.IP(addr.Unmap().AsSlice()), "", nil
	}
	if err := checkDNSName(h); err != nil {
		return nil, "", fmt.Errorf("host %q is not an IP address or a DNS name: %w", h, err)
	}
	return nil, strings.ToLower(h), nil
}

// checkDNSName accepts a host name of letter-digit-hyphen labels, with at
// most one wildcard, as the whole first label ("*.nodes.example").
func checkDNSName(h string) error {
	if strings.Contains(h, ":") {
		return errors.New("it holds a colon (give hosts without ports)")
	}
	if len(h) > maxDNSNameLen {
		return fmt.Errorf("longer than %d characters", maxDNSNameLen)
	}
	rest, wildcard := strings.CutPrefix(h, "*.")
	labels := strings.Split(rest, ".")
	for _, l := range labels {
		if err := checkLabel(l); err != nil {
			return err
		}
	}
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" {
		return errors.New("its last label is numeric")
	}
	if wildcard && len(labels) < 2 {
		return errors.New(`a wildcard must be followed by at least two labels, as in "*.nodes.example"`)
	}
	return nil
}

// checkLabel accepts one DNS label: 1 to 63 letters, digits and hyphens,
// not starting or ending with a hyphen.
func checkLabel(l string) error {
	switch {
	case l == "":
		return errors.New("empty label")
	case len(l) > 63:
		return fmt.Errorf("label %q is longer than 63 characters", l)
	case strings.Contains(l, "*"):
		return errors.New(`a wildcard is allowed only as a whole leading label, "*."`)
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("label %q starts or ends with a hyphen", l)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("label %q may hold only letters, digits and hyphens", l)
		}
	}
	return nil
}

package routingpolicy

import (
	"strings"

	"github.com/miekg/dns"
)

// canonicalName returns name fully qualified, in lower case, with its escapes in the one form a
// name unpacked from the wire has. RFC 1035 5.1 lets zone data write one octet as \DDD or \c
// (`\097bc` is `abc`, `x\046y` is `x\.y`, `\042` is the wildcard label `*`), and queries arrive
// unpacked (`abc`, `x\.y`, `\195\188` for the octets of "ü"): names in the zone are keyed by
// this form so they compare as strings. file does the same when it inserts a record
// (canonicalEscape: to wire form and back), for names with a backslash.
func canonicalName(name string) string {
	name = dns.Fqdn(name)
	if !printable(name) {
		var buf [256]byte
		if off, err := dns.PackDomainName(name, buf[:], 0, nil, false); err == nil {
			if out, _, err := dns.UnpackDomainName(buf[:off], 0); err == nil {
				name = out
			}
		}
	}
	return strings.ToLower(name)
}

// wireEscaped reports whether every escape in name is one a name unpacked from the wire has:
// \DDD for an octet outside printable ASCII, \c for a character that must be escaped. A query
// from the wire always is; one built inside the server (another plugin's lookup) may not be.
// It does not allocate: the query path calls it for every name that has a backslash.
func wireEscaped(name string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] != '\\' {
			continue
		}
		c, n := escapeAt(name, i)
		switch {
		case n == 4 && (c >= ' ' && c <= '~' || c > 255):
			return false
		case n == 2 && !escapedInLabel(c):
			return false
		case n == 1:
			return false
		}
		i += n - 1
	}
	return true
}

// escapeAt decodes the escape that starts at name[i], a backslash (RFC 1035 5.1): the octet
// (\DDD may be out of range) and the length of the escape; n is 1 for a backslash that ends name.
func escapeAt(name string, i int) (c, n int) {
	switch {
	case i+3 < len(name) && isDigit(name[i+1]) && isDigit(name[i+2]) && isDigit(name[i+3]):
		return int(name[i+1]-'0')*100 + int(name[i+2]-'0')*10 + int(name[i+3]-'0'), 4
	case i+1 < len(name):
		return int(name[i+1]), 2
	}
	return -1, 1
}

// escapedInLabel reports whether unpacking a name escapes c as \c (miekg/dns
// isDomainNameLabelSpecial).
func escapedInLabel(c int) bool {
	switch c {
	case '.', ' ', '\'', '@', ';', '(', ')', '"', '\\':
		return true
	}
	return false
}

// printable reports whether name is in the form unpacking gives without escaping anything: no
// octet outside printable ASCII, none that unpacking escapes but the dots between labels.
func printable(name string) bool {
	for i := range len(name) {
		if c := name[i]; c < ' ' || c > '~' || c != '.' && escapedInLabel(int(c)) {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// lowerTargets lower-cases the names in the rdata of rr, as file does on insert, and leaves
// their escapes as written: answers carry the same octets as file's (an escaped upper-case
// letter, `\077ail`, stays upper case on the wire, in file too). The names a lookup follows are
// canonicalized where they are used (canonicalName): CNAME targets (rrset.target, item.target),
// glue, additional data, DNAME targets.
func lowerTargets(rr dns.RR) {
	switch v := rr.(type) {
	case *dns.NS:
		v.Ns = strings.ToLower(v.Ns)
	case *dns.CNAME:
		v.Target = strings.ToLower(v.Target)
	case *dns.MX:
		v.Mx = strings.ToLower(v.Mx)
	case *dns.SOA:
		v.Ns = strings.ToLower(v.Ns)
		v.Mbox = strings.ToLower(v.Mbox)
	case *dns.SVCB:
		v.Target = strings.ToLower(v.Target)
	case *dns.HTTPS:
		v.Target = strings.ToLower(v.Target)
	}
}

// relName makes name fully qualified relative to origin, in canonical form: "@" is the origin,
// a name ending in a dot is absolute.
func relName(name, origin string) string {
	switch {
	case name == "@":
		return origin
	case dns.IsFqdn(name):
		return canonicalName(name)
	case origin == ".":
		return canonicalName(name + ".")
	}
	return canonicalName(name + "." + origin)
}

// maxNameLen is the longest a domain name may be on the wire (RFC 1035 3.1).
const maxNameLen = 255

// wireLen returns the length on the wire of name, fully qualified and valid. dns.IsDomainName
// lets names of up to 257 octets through, so it cannot tell a substitution that is too long.
func wireLen(name string) int {
	if name == "." {
		return 1
	}
	n := len(name) + 1 // a length octet for each label, the root's, no dots
	for i := 0; i < len(name); i++ {
		if name[i] == '\\' {
			_, k := escapeAt(name, i)
			n -= k - 1
			i += k - 1
		}
	}
	return n
}

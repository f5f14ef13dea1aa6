package credspec

import (
	"net"
	"net/url"
	"regexp"
	"strings"

	"github.com/mangohq/mango/api-server/internal/agentspec"
	"github.com/mangohq/mango/api-server/internal/apierror"
)

// checkEndpointURL validates a URL a credential is used with or sent to:
// https, or http to a loopback host (tests, local servers).
func checkEndpointURL(v *string, p string) (string, error) {
	if v == nil || *v == "" {
		return "", apierror.Invalid("%s: is required", p)
	}
	if len(*v) > 2048 {
		return "", apierror.Invalid("%s: must be at most 2048 characters", p)
	}
	u, err := url.Parse(*v)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "", apierror.Invalid("%s: must be an absolute http(s) URL", p)
	}
	if u.User != nil {
		return "", apierror.Invalid("%s: must not carry user information; credentials go in the credential's secret fields", p)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !loopbackHost(u.Hostname()) {
			return "", apierror.Invalid("%s: must use https (http is accepted for loopback hosts only)", p)
		}
	default:
		return "", apierror.Invalid("%s: must be an https URL, got scheme %q", p, u.Scheme)
	}
	if u.Fragment != "" {
		return "", apierror.Invalid("%s: must not have a fragment", p)
	}
	return u.String(), nil
}

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

var secretNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

var hostPattern = regexp.MustCompile(`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,62}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*(:[0-9]{1,5})?$`)

func parseNetworking(n *networkingIn, p string) (credentialNetworking, error) {
	switch n.Type {
	case "unrestricted":
		if len(n.AllowedHosts) > 0 {
			return credentialNetworking{}, apierror.Invalid("%s.allowed_hosts: only limited networking takes allowed_hosts", p)
		}
		return credentialNetworking{Type: "unrestricted"}, nil
	case "limited":
		if len(n.AllowedHosts) == 0 {
			return credentialNetworking{}, apierror.Invalid("%s.allowed_hosts: is required for limited networking (at least one host)", p)
		}
		if len(n.AllowedHosts) > 100 {
			return credentialNetworking{}, apierror.Invalid("%s.allowed_hosts: at most 100 hosts are allowed, got %d", p, len(n.AllowedHosts))
		}
		for i, h := range n.AllowedHosts {
			if !hostPattern.MatchString(h) {
				return credentialNetworking{}, apierror.Invalid("%s.allowed_hosts[%d]: must be a host name (optionally *.-prefixed, with an optional port), got %q", p, i, h)
			}
		}
		return credentialNetworking{Type: "limited", AllowedHosts: n.AllowedHosts}, nil
	case "":
		return credentialNetworking{}, apierror.Invalid("%s.type: is required (unrestricted or limited)", p)
	}
	return credentialNetworking{}, apierror.Invalid("%s.type: must be unrestricted or limited, got %q", p, n.Type)
}

func checkOptLen(v *string, p string, maxLen int) error {
	if v == nil {
		return nil
	}
	return agentspec.CheckLen(p, *v, 1, maxLen)
}

package main

import (
	"cmp"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Connection strings carry credentials (a NATS URL's user and password or
// token, a PostgreSQL URL's or keyword/value string's password), and
// Tresor never prints them: what it shows of a connection string goes
// through redactURL, a flag's default (taken from the environment) is
// shown redacted in --help, and main redacts the final error, since
// libraries echo the string they were given (url.Parse's errors quote it
// whole).

// redacted replaces a secret in what Tresor prints.
const redacted = "xxxxx"

var (
	// urlPassword is a password parameter of a URL's query
	// (PostgreSQL's ?password= and ?sslpassword=).
	urlPassword = regexp.MustCompile(`(?i)password=([^&#\s]*)`)
	// keywordPassword is the password of a PostgreSQL keyword/value string
	// ("host=db password='s3 cret'").
	keywordPassword = regexp.MustCompile(`(?i)password\s*=\s*('(?:[^'\\]|\\.)*'|\S*)`)
)

// secretSpans returns where the secrets of a connection string are, in
// order and not overlapping: the password in each URL's userinfo (or the
// whole userinfo of a NATS URL without a password, which NATS reads as a
// token), and the value of every password parameter. A connection string
// may list several URLs, comma-separated (NATS, PostgreSQL multi-host), and
// a NATS URL may leave out its scheme ("user:password@host:4222"). It errs
// towards redacting too much: a string it cannot read is still searched for
// anything that looks like a secret, and in a list the userinfo runs to the
// last "@" before the next scheme.
func secretSpans(conn string) [][2]int {
	var spans [][2]int
	userinfo := func(start, end int, scheme string) {
		at := strings.LastIndex(conn[start:end], "@")
		if at < 0 {
			return
		}
		if colon := strings.IndexByte(conn[start:start+at], ':'); colon >= 0 {
			spans = append(spans, [2]int{start + colon + 1, start + at})
		} else if !strings.HasPrefix(strings.ToLower(scheme), "postgres") {
			spans = append(spans, [2]int{start, start + at})
		}
	}
	params := urlPassword
	switch i := strings.Index(conn, "://"); {
	case i >= 0:
		for end := i; end < len(conn); i = end {
			start := i + len("://")
			end = len(conn)
			if next := strings.Index(conn[start:], "://"); next >= 0 {
				end = start + next
			}
			userinfo(start, end, conn[strings.LastIndexAny(conn[:i], ", ")+1:i])
		}
	case strings.Contains(conn, "="):
		params = keywordPassword
	default:
		userinfo(0, len(conn), "")
	}
	for _, m := range params.FindAllStringSubmatchIndex(conn, -1) {
		spans = append(spans, [2]int{m[2], m[3]})
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return cmp.Compare(a[0], b[0]) })
	merged := spans[:0]
	for _, s := range spans {
		if n := len(merged); n > 0 && s[0] <= merged[n-1][1] {
			merged[n-1][1] = max(merged[n-1][1], s[1])
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// redactURL returns a connection string fit to print, its secrets
// replaced with xxxxx.
func redactURL(conn string) string {
	var b strings.Builder
	last := 0
	for _, s := range secretSpans(conn) {
		b.WriteString(conn[last:s[0]])
		if s[1] > s[0] {
			b.WriteString(redacted)
		}
		last = s[1]
	}
	b.WriteString(conn[last:])
	return b.String()
}

// redactedError is an error whose message is shown without secrets; it
// unwraps to the original, so errors.Is and errors.As still see it.
type redactedError struct {
	err     error
	secrets []string // longest first, so that none is left half shown
}

func (e *redactedError) Error() string {
	msg := e.err.Error()
	for _, s := range e.secrets {
		msg = strings.ReplaceAll(msg, s, redacted)
	}
	return msg
}

func (e *redactedError) Unwrap() error { return e.err }

// redactErr returns err with the secrets of the connection strings conns
// replaced in its message, as written and as decoded.
func redactErr(err error, conns ...string) error {
	if err == nil {
		return nil
	}
	var secrets []string
	for _, c := range conns {
		for _, s := range secretSpans(c) {
			raw := c[s[0]:s[1]]
			secrets = append(secrets, raw)
			if dec, err := url.PathUnescape(raw); err == nil && dec != raw {
				secrets = append(secrets, dec)
			}
		}
	}
	secrets = slices.DeleteFunc(secrets, func(s string) bool { return s == "" })
	if len(secrets) == 0 {
		return err
	}
	slices.SortFunc(secrets, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return &redactedError{err: err, secrets: secrets}
}

// connectionFlags names the flags and environment variables that hold
// connection strings.
var connectionFlags = []string{"nats", "database-url"}

// connectionStrings returns the connection strings a command was given,
// by flag or environment, for redactErr.
func connectionStrings(cmd *cobra.Command) []string {
	var conns []string
	for _, name := range connectionFlags {
		conns = append(conns, envOr(name, ""))
		if cmd != nil {
			if f := cmd.Flags().Lookup(name); f != nil {
				conns = append(conns, f.Value.String())
			}
		}
	}
	return conns
}

// connectionFlag adds a string flag holding a connection string, set from
// its environment variable when not given (applyEnv); --help shows that
// default redacted (showEnvDefaults).
func connectionFlag(f *pflag.FlagSet, p *string, name, usage string) {
	f.StringVar(p, name, "", usage)
	withEnv(f, name)
}

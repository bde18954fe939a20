package main

import (
	"errors"
	"fmt"
	"net/url"
	"testing"
)

// TestRedactURL checks the redaction of every shape of connection string
// Tresor takes: the secret goes, what locates the server stays.
func TestRedactURL(t *testing.T) {
	for conn, want := range map[string]string{
		"":                                                "",
		"nats://127.0.0.1:4222":                           "nats://127.0.0.1:4222",
		"nats://u:p@h:4222":                               "nats://u:xxxxx@h:4222",
		"nats://u:p@h1:4222,nats://v:q@h2":                "nats://u:xxxxx@h1:4222,nats://v:xxxxx@h2",
		"nats://h1,nats://v:q@h2":                         "nats://h1,nats://v:xxxxx@h2",
		"tls://u:p@h, wss://v:q@h2":                       "tls://u:xxxxx@h, wss://v:xxxxx@h2",
		"nats://s3cr3t-token@h:4222":                      "nats://xxxxx@h:4222",
		"u:p@h:4222":                                      "u:xxxxx@h:4222",
		"u:p@h1:4222,h2:4222":                             "u:xxxxx@h1:4222,h2:4222",
		"nats://u:p,w@h":                                  "nats://u:xxxxx@h",
		"nats://u:pa/ss@h":                                "nats://u:xxxxx@h",
		"nats://u:p:q@h:port":                             "nats://u:xxxxx@h:port",
		"nats://u:p%40ss@h":                               "nats://u:xxxxx@h",
		"postgres://postgres@127.0.0.1/db":                "postgres://postgres@127.0.0.1/db",
		"postgres://u:p@h1,h2/db":                         "postgres://u:xxxxx@h1,h2/db",
		"postgresql://u:p@h/db?sslmode=off":               "postgresql://u:xxxxx@h/db?sslmode=off",
		"postgres://u@h/db?password=p&sslmode=disable":    "postgres://u@h/db?password=xxxxx&sslmode=disable",
		"postgres://u@h/db?sslmode=verify&sslpassword=p":  "postgres://u@h/db?sslmode=verify&sslpassword=xxxxx",
		"host=h user=u password=p dbname=d":               "host=h user=u password=xxxxx dbname=d",
		`host=h password='p q\' r' dbname=d`:              "host=h password=xxxxx dbname=d",
		"host=h PASSWORD = p sslpassword=q":               "host=h PASSWORD = xxxxx sslpassword=xxxxx",
		"postgres://u:p@h/db?application_name=me@example": "postgres://u:xxxxx@example",
	} {
		if got := redactURL(conn); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", conn, got, want)
		}
	}
}

// TestRedactErr checks that an error echoing a connection string, as
// url.Parse's does, is shown without its secret, raw or decoded, and still
// unwraps to the original.
func TestRedactErr(t *testing.T) {
	conn := "nats://u:p%40ss-w0rd@h:port"
	_, parseErr := url.Parse(conn)
	err := redactErr(fmt.Errorf("connect to nats %s: %w (decoded p@ss-w0rd)", conn, parseErr), "", conn, "postgres://x@y/z")
	if got := err.Error(); got != `connect to nats nats://u:xxxxx@h:port: parse "nats://u:xxxxx@h:port": invalid port ":port" after host (decoded xxxxx)` {
		t.Errorf("redacted error %q", got)
	}
	if !errors.Is(err, parseErr) {
		t.Errorf("redacted error does not unwrap to %v", parseErr)
	}
	if plain := errors.New("no secret here"); redactErr(plain, "nats://h:4222") != plain {
		t.Error("an error without secrets to redact was wrapped")
	}
}

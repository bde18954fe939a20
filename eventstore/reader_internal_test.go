package eventstore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestReaderListenerNeedsTheReadersCredentials checks who the advertised
// listener lets in: nobody without credentials, not even in-process;
// not the writer's user over TCP, even with its password; the reader
// with the advertised ones. And the advertisement is readable by the
// directory's owner only.
func TestReaderListenerNeedsTheReadersCredentials(t *testing.T) {
	dir := t.TempDir()
	srv, err := RunEmbedded(EmbeddedConfig{DataDir: dir, Readers: &ReaderAccess{}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	url := srv.ClientURL()
	if url == "" {
		t.Fatal("no reader listener")
	}
	// The anonymous in-process client takes 10s to be turned away: the
	// server's refusal waits for its write deadline on the pipe.
	refused := map[string][]nats.Option{
		"anonymous over TCP":             nil,
		"anonymous in-process":           {nats.InProcessServer(srv.srv)},
		"the writer over TCP":            {nats.UserInfo(writerUser, srv.writerPassword)},
		"the reader with a bad password": {nats.UserInfo(readerUser, "guess")},
	}
	for what, opts := range refused {
		target := url
		if what == "anonymous in-process" {
			target = ""
		}
		if nc, err := nats.Connect(target, opts...); err == nil {
			nc.Close()
			t.Errorf("%s: connected", what)
		}
	}
	info, err := os.Stat(filepath.Join(dir, readerAdvertName))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("advertisement: %v, %v; want mode 0600", info, err)
	}
	ad, err := readAdvert(dir)
	if err != nil || ad.URL != url || ad.Instance != srv.lock.holder.Instance {
		t.Fatalf("advertisement %+v: %v", ad, err)
	}
	nc, err := nats.Connect(ad.URL, nats.UserInfo(ad.User, ad.Password))
	if err != nil {
		t.Fatalf("the reader with the advertised credentials: %v", err)
	}
	nc.Close()
	srv.Shutdown()
	if _, err := os.Stat(filepath.Join(dir, readerAdvertName)); !os.IsNotExist(err) {
		t.Fatalf("advertisement after a clean shutdown: %v, want it removed", err)
	}
}

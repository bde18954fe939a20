package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fdj/tresor/api"
)

// front is serve's HTTP server. It answers from the moment it listens:
// with api.Opening while the stream, the buckets and the read models open,
// then with the API once handle has been given it.
type front struct {
	srv     *http.Server
	handler atomic.Pointer[http.Handler]
	// served is closed once Serve has returned, with its error in
	// serveErr.
	served   chan struct{}
	serveErr error
	stopOnce sync.Once
	stopErr  error
}

// listen listens on --http and serves opening until handle.
func listen(cfg *Config, log *slog.Logger, opening http.Handler) (*front, error) {
	ln, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w", cfg.HTTP, err)
	}
	f := &front{served: make(chan struct{})}
	f.handle(opening)
	f.srv = &http.Server{
		Handler:           f,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      api.RequestTimeout + 5*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
	log.Info("listening on " + ln.Addr().String())
	go func() {
		f.serveErr = f.srv.Serve(ln)
		close(f.served)
	}()
	return f, nil
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*f.handler.Load()).ServeHTTP(w, r)
}

// handle serves h from now on.
func (f *front) handle(h http.Handler) { f.handler.Store(&h) }

// failed returns why the server stopped serving by itself; it is only
// read once served is closed.
func (f *front) failed() error { return fmt.Errorf("http server: %w", f.serveErr) }

// shutdown stops accepting requests and waits, bounded by shutdownMax,
// for those in flight. Later calls return the first one's error.
func (f *front) shutdown() error {
	f.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownMax)
		defer cancel()
		if err := f.srv.Shutdown(ctx); err != nil {
			f.stopErr = fmt.Errorf("http shutdown: %w", err)
			return
		}
		<-f.served
		if !errors.Is(f.serveErr, http.ErrServerClosed) {
			f.stopErr = f.failed()
		}
	})
	return f.stopErr
}

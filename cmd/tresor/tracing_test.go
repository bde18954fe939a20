package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP traces endpoint in the test's process: it
// decodes what serve's exporter sends with the protocol's own messages.
type otlpReceiver struct {
	url   string
	mu    sync.Mutex
	spans []*tracepb.Span
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	rcv := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var req coltrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &req)
		}
		if r.URL.Path != "/v1/traces" || err != nil {
			t.Errorf("OTLP receiver: %s %s: %v", r.Method, r.URL.Path, err)
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		rcv.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				rcv.spans = append(rcv.spans, ss.Spans...)
			}
		}
		rcv.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	rcv.url = srv.URL + "/v1/traces"
	return rcv
}

// trace returns the spans received of the trace whose root span is named
// root, "" when none is there yet.
func (r *otlpReceiver) trace(root string) (string, []*tracepb.Span) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if s.Name != root || len(s.ParentSpanId) != 0 {
			continue
		}
		var out []*tracepb.Span
		for _, o := range r.spans {
			if bytes.Equal(o.TraceId, s.TraceId) {
				out = append(out, o)
			}
		}
		return hex.EncodeToString(s.TraceId), out
	}
	return "", nil
}

// TestAStakeIsOneTraceFromTheHandlerToTheCommit: serve given an OTLP
// endpoint exports one trace per request; a stake's holds the handler's
// span and, beneath it, the writer's wait, decision and commit and the
// wait for the read models, each inside its parent; no attribute names
// the player or an amount.
func TestAStakeIsOneTraceFromTheHandlerToTheCommit(t *testing.T) {
	t.Parallel()
	rcv := startOTLPReceiver(t)
	s := startServe(t, t.TempDir(), "--otlp-endpoint", rcv.url)
	_, p42 := s.fundedPlayer()
	s.must(201, call{"POST", "/v1/players/p-42/plays", p42, "k1", `{"stake":"1.00"}`})
	const root = "POST /v1/players/{player}/plays"
	var id string
	var spans []*tracepb.Span
	deadline := time.Now().Add(30 * time.Second) // the exporter sends its batch every 5 s
	for {
		if id, spans = rcv.trace(root); len(spans) >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no whole trace of a stake after 30s: trace %q with %d spans", id, len(spans))
		}
		time.Sleep(100 * time.Millisecond)
	}
	byName := map[string]*tracepb.Span{}
	for _, sp := range spans {
		byName[sp.Name] = sp
		for _, a := range sp.Attributes {
			if v := a.Value.String(); strings.Contains(v, "p-42") || strings.Contains(v, "1.00") {
				t.Errorf("span %s: attribute %s = %s names the player or an amount", sp.Name, a.Key, v)
			}
		}
	}
	parentOf := map[string]string{"writer.execute": root, "writer.decide": "writer.execute", "writer.commit": "writer.execute", "projections.wait": root}
	for name, parent := range parentOf {
		sp, pp := byName[name], byName[parent]
		if sp == nil || pp == nil {
			t.Fatalf("trace %s: no %s under %s: %v", id, name, parent, names(spans))
		}
		if !bytes.Equal(sp.ParentSpanId, pp.SpanId) || sp.StartTimeUnixNano < pp.StartTimeUnixNano || sp.EndTimeUnixNano > pp.EndTimeUnixNano {
			t.Errorf("trace %s: %s is not inside %s", id, name, parent)
		}
	}
	if d, c := byName["writer.decide"], byName["writer.commit"]; c.StartTimeUnixNano < d.EndTimeUnixNano {
		t.Errorf("trace %s: the commit starts before the decision ends", id)
	}
	if route := spanAttr(byName[root], "http.route"); route != root {
		t.Errorf("the handler's span has route %q, want %q", route, root)
	}
}

// names lists the spans' names, for a failure.
func names(spans []*tracepb.Span) string {
	var out []string
	for _, s := range spans {
		out = append(out, fmt.Sprintf("%s (%x under %x)", s.Name, s.SpanId, s.ParentSpanId))
	}
	return strings.Join(out, ", ")
}

// spanAttr returns a span's string attribute key, "" when it has none.
func spanAttr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.GetStringValue()
		}
	}
	return ""
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// The end-to-end tests talk to `tresor serve` through contractClient, which
// holds every answer to api/openapi.yaml, the contract clients are
// generated from: a request to a documented operation must get a status the
// operation lists (explicitly: its default response stands for 500 only),
// with a documented content type and a body its schema accepts. A
// violation is the request's error, so the test that sent it fails there.
var contractClient = &http.Client{Transport: &contractTransport{next: http.DefaultTransport}}

// contractTransport checks each exchange against the OpenAPI document.
type contractTransport struct {
	next http.RoundTripper
	once sync.Once
	// router finds a request's operation; err is why it could not be built.
	router routers.Router
	err    error
}

// contractBodyMax bounds what the check reads of a body; the tests' bodies
// are far smaller.
const contractBodyMax = 8 << 20

// load reads api/openapi.yaml once. Its servers are dropped: the tests'
// servers listen on random ports, and the router would match hosts.
func (c *contractTransport) load() {
	doc, err := openapi3.NewLoader().LoadFromFile("../../api/openapi.yaml")
	if err != nil {
		c.err = fmt.Errorf("load api/openapi.yaml: %w", err)
		return
	}
	if err := doc.Validate(context.Background()); err != nil {
		c.err = fmt.Errorf("api/openapi.yaml is not a valid OpenAPI document: %w", err)
		return
	}
	doc.Servers = nil
	c.router, c.err = gorillamux.NewRouter(doc)
	openapi3filter.RegisterBodyDecoder("text/csv", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.PlainBodyDecoder)
}

// RoundTrip sends the request and checks the answer.
func (c *contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.once.Do(c.load)
	if c.err != nil {
		return nil, c.err
	}
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, contractBodyMax))
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("%s %s: read the answer: %w", req.Method, req.URL.Path, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err := c.check(req, resp, body); err != nil {
		return nil, fmt.Errorf("%s %s: %d answer does not follow api/openapi.yaml: %w", req.Method, req.URL.RequestURI(), resp.StatusCode, err)
	}
	return resp, nil
}

// check validates one answer. Requests to no documented operation (an
// unknown path, a method a path does not have, the pages) are the
// server's 404 problem or a page: nothing to hold them to.
func (c *contractTransport) check(req *http.Request, resp *http.Response, body []byte) error {
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		return nil
	}
	op := route.Operation
	status := strconv.Itoa(resp.StatusCode)
	if resp.StatusCode != http.StatusInternalServerError && op.Responses.Value(status) == nil {
		return fmt.Errorf("status %s is not among the responses of %s", status, op.OperationID)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{ExcludeRequestBody: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if req.Method == http.MethodHead || resp.StatusCode == http.StatusNotModified {
		in.Options.ExcludeResponseBody = true
	}
	return openapi3filter.ValidateResponse(req.Context(), in)
}

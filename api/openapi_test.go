package api_test

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fdj/tresor/api"
)

// TestOpenAPIMatchesRoutes holds api/openapi.yaml to the server's routes:
// every registered "METHOD /path" is documented, and nothing else is.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	f, err := os.Open("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pathLine := regexp.MustCompile(`^  (/\S*):$`)
	methodLine := regexp.MustCompile(`^    (get|put|post|patch|delete):$`)
	var documented []string
	inPaths, path := false, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "paths:":
			inPaths = true
		case !inPaths:
		case pathLine.MatchString(line):
			path = pathLine.FindStringSubmatch(line)[1]
		case methodLine.MatchString(line):
			documented = append(documented, strings.ToUpper(methodLine.FindStringSubmatch(line)[1])+" "+path)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	routes := api.NewServer(api.Config{}).Routes()
	slices.Sort(routes)
	slices.Sort(documented)
	if !slices.Equal(routes, documented) {
		t.Fatalf("routes and openapi.yaml disagree:\nserver:  %v\nopenapi: %v", routes, documented)
	}
}

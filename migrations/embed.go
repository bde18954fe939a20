// Package migrations holds Tresor's PostgreSQL schema: numbered,
// forward-only SQL files embedded in the binary and applied with tern
// (github.com/jackc/tern/v2), by `tresor migrate` and at start.
//
// Two sets: Control (the projections' generations: which copy of the read
// models readers use) in the namespace schema, and Projections (the read
// models themselves), applied to each generation's own schema, so that a
// rebuild builds a fresh copy beside the one in use. Files use the
// placeholders {{.control}} and {{.schema}}, the quoted schema names.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed control/*.sql
var control embed.FS

//go:embed projections/*.sql
var projections embed.FS

// Control returns the control migrations, numbered from 001.
func Control() fs.FS { return sub(control, "control") }

// Projections returns the read models' migrations, numbered from 001.
func Projections() fs.FS { return sub(projections, "projections") }

func sub(f embed.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		// The directories are embedded above: a failure is a build bug.
		panic("migrations: " + err.Error())
	}
	return s
}

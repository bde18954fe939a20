package api

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"github.com/fdj/tresor/domain"
)

// Personal opens sealed personal fields for an answer, and seals those
// the API itself records (personal.Keyring): Reveal answers the plaintext,
// or domain.ErasedText once the person's key is destroyed.
type Personal interface {
	Reveal(ctx context.Context, sealed string) string
	Seal(o domain.Owner, plain string) (string, error)
	Pseudonym(subject string) (string, error)
}

// pseudonym names a token's subject as a sealed revocation matches it;
// "" when it cannot, which matches none.
func (s *Server) pseudonym(subject string) string {
	if s.cfg.Personal == nil {
		return ""
	}
	ref, err := s.cfg.Personal.Pseudonym(subject)
	if err != nil {
		s.cfg.Logger.Error("a token's subject without its pseudonym: sealed revocations not checked", "err", err)
		return ""
	}
	return ref
}

// revealMode says how a revealed text is written in place of its sealed
// form.
type revealMode int

const (
	revealText revealMode = iota // as is (a problem's detail, before it is encoded)
	revealJSON                   // inside a JSON string, escaped
	revealCSV                    // a CSV cell, quoted when it must be
)

// sealedChar reports whether c can be part of a sealed field's key id or
// its unpadded base64url.
func sealedChar(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_'
}

// sealedEnd returns where the sealed field whose prefix ends at j ends:
// after its key id, one ':' and its base64url. Only that one ':' belongs
// to it, so that a text going on with a colon ("proposed by X: ...") keeps
// it and the field still opens.
func sealedEnd(b []byte, j int) int {
	colon := false
	for ; j < len(b); j++ {
		if b[j] == ':' && !colon {
			colon = true
			continue
		}
		if !sealedChar(b[j]) {
			break
		}
	}
	return j
}

// reveal replaces every sealed field in an answer by what it reads as.
// Every read model, report and event answered holds personal fields only
// sealed, so this is the one place they are opened, after the answer is
// built: an answer without any costs one scan for the prefix.
func (s *Server) reveal(ctx context.Context, b []byte, mode revealMode) []byte {
	prefix := []byte(domain.SealedPrefix)
	if s.cfg.Personal == nil || !bytes.Contains(b, prefix) {
		return b
	}
	var out bytes.Buffer
	for {
		i := bytes.Index(b, prefix)
		if i < 0 {
			out.Write(b)
			return out.Bytes()
		}
		j := sealedEnd(b, i+len(prefix))
		out.Write(b[:i])
		out.WriteString(encodeRevealed(s.cfg.Personal.Reveal(ctx, string(b[i:j])), mode))
		b = b[j:]
	}
}

// revealString is reveal for a text.
func (s *Server) revealString(ctx context.Context, text string) string {
	return string(s.reveal(ctx, []byte(text), revealText))
}

func encodeRevealed(plain string, mode revealMode) string {
	switch mode {
	case revealJSON:
		q, _ := json.Marshal(plain)
		return string(q[1 : len(q)-1])
	case revealCSV:
		if strings.ContainsAny(plain, ",\"\r\n") {
			return `"` + strings.ReplaceAll(plain, `"`, `""`) + `"`
		}
	}
	return plain
}

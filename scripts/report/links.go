package main

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

var (
	// inlineLink matches [text](target) and ![alt](target), the target up to
	// a space (a title follows) or the closing parenthesis.
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refLink matches a reference definition: [label]: target.
	refLink   = regexp.MustCompile(`(?m)^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s|$)`)
	fenceLine = regexp.MustCompile("^\\s*(```|~~~)")
)

// stripCode blanks fenced code blocks and code spans, whose brackets are not
// links.
func stripCode(md string) string {
	var b strings.Builder
	inFence := false
	for line := range strings.Lines(md) {
		if fenceLine.MatchString(line) {
			inFence = !inFence
			b.WriteString("\n")
			continue
		}
		if inFence {
			b.WriteString("\n")
			continue
		}
		b.WriteString(codeSpan.ReplaceAllString(line, "``"))
	}
	return b.String()
}

// relativeLinks returns the targets of a markdown document's links that are
// paths in the repository (no scheme, not a bare #fragment), with the
// fragment and query removed and percent-escapes decoded.
func relativeLinks(md string) []string {
	text := stripCode(md)
	var out []string
	for _, re := range []*regexp.Regexp{inlineLink, refLink} {
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			t := m[1]
			if strings.HasPrefix(t, "#") || strings.Contains(t, "://") || strings.HasPrefix(t, "mailto:") {
				continue
			}
			t, _, _ = strings.Cut(t, "#")
			t, _, _ = strings.Cut(t, "?")
			if u, err := url.PathUnescape(t); err == nil {
				t = u
			}
			if t != "" {
				out = append(out, t)
			}
		}
	}
	return out
}

// linkedDocs are the documents whose relative links must resolve: the
// README, docs/*.md and every README.md under results/.
func linkedDocs(root string) ([]string, error) {
	docs := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		docs = append(docs, filepath.ToSlash(rel))
	}
	err = filepath.WalkDir(filepath.Join(root, "results"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "README.md" {
			rel, _ := filepath.Rel(root, p)
			docs = append(docs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(docs)
	return docs, nil
}

// brokenLinks returns "doc: target" for every relative link of the linked
// documents whose target does not exist. A document that does not exist
// itself is skipped (a repository without docs/).
func brokenLinks(root string) ([]string, error) {
	docs, err := linkedDocs(root)
	if err != nil {
		return nil, err
	}
	var broken []string
	for _, doc := range docs {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(doc)))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, t := range relativeLinks(string(data)) {
			target := path.Join(path.Dir(doc), t)
			if strings.HasPrefix(t, "/") {
				target = strings.TrimPrefix(t, "/")
			}
			if strings.HasPrefix(target, "../") {
				broken = append(broken, fmt.Sprintf("%s: %s (outside the repository)", doc, t))
				continue
			}
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err != nil {
				broken = append(broken, fmt.Sprintf("%s: %s", doc, t))
			}
		}
	}
	return broken, nil
}

// citedRecords returns the records README.md links: for each link into
// results/<machine>/<entry>[/...], the path results/<machine>/<entry>,
// except a machine's own README.md.
func citedRecords(root string) (map[string]bool, error) {
	cited := map[string]bool{}
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if os.IsNotExist(err) {
		return cited, nil
	}
	if err != nil {
		return nil, err
	}
	for _, t := range relativeLinks(string(data)) {
		p := path.Clean(t)
		parts := strings.Split(p, "/")
		if len(parts) < 3 || parts[0] != "results" || parts[2] == machineREADME && len(parts) == 3 {
			continue
		}
		cited[path.Join(parts[:3]...)] = true
	}
	return cited, nil
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeGit stands in for git log in the fixture, which has no history: two
// files were added, the rest are not committed.
func fakeGit(string) (map[string]gitAdd, error) {
	return map[string]gitAdd{
		"results/gpu-x/bare.csv":                  {"1111111", "2026-11-19"},
		"results/gpu-x/record-abc1234/bench.txt":  {"2222222", "2026-11-21"},
		"results/gpu-x/record-abc1234/README.md":  {"2222222", "2026-11-21"},
		"results/gpu-x/nohead/data.txt":           {"3333333", "2026-11-22"},
		"results/gpu-x/described-1.txt":           {"3333333", "2026-11-22"},
		"results/gpu-x/described-2.txt":           {"3333333", "2026-11-22"},
		"results/gpu-x/loose.txt":                 {"4444444", "2026-11-23"},
		"results/cpu-y-host/hand.txt":             {"5555555", "2026-11-24"},
		"results/gpu-x/record-abc1234/run.sh":     {"2222222", "2026-11-21"},
		"results/gpu-x/record-abc1234/torch.txt":  {"2222222", "2026-11-21"},
		"results/gpu-x/README.md":                 {"2222222", "2026-11-21"},
		"results/cpu-y-host/README.md":            {"5555555", "2026-11-24"},
		"results/records.tsv":                     {"5555555", "2026-11-24"},
		"results/gpu-x/record-abc1234/unrelated":  {"9999999", "2026-11-01"},
		"results/some/file/that/is/gone/any/more": {"9999999", "2026-11-01"},
	}, nil
}

// fixture copies testdata/repo into a temporary directory.
func fixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "repo"))))
	return dir
}

// golden compares got with a file in testdata, rewriting it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	file := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(file, got, 0o644))
	}
	want, err := os.ReadFile(file)
	require.NoError(t, err, "run with -update to create the golden file")
	assert.Equal(t, string(want), string(got))
}

func TestIndexGolden(t *testing.T) {
	root := fixture(t)
	var stdout, stderr bytes.Buffer
	require.NoError(t, runIndex([]string{"-root", root}, &stdout, &stderr, fakeGit))
	assert.Empty(t, stderr.String())
	assert.Contains(t, stdout.String(), "7 records indexed (2 cited by README.md, 5 experiments); command recorded for 4, not recorded for 3")

	js, err := os.ReadFile(filepath.Join(root, "results", "index.json"))
	require.NoError(t, err)
	golden(t, "index-golden.json", js)
	md, err := os.ReadFile(filepath.Join(root, "results", "README.md"))
	require.NoError(t, err)
	golden(t, "index-golden.md", md)

	stdout.Reset()
	require.NoError(t, runIndex([]string{"-root", root, "-check"}, &stdout, &stderr, fakeGit), stderr.String())
}

func TestIndexCheck(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, root string)
		want   string // on stderr; "" when the check passes
	}{
		{"current index passes", func(*testing.T, string) {}, ""},
		{"a stray file directly under results/", func(t *testing.T, root string) {
			write(t, root, "results/notes.txt", "x")
		}, "results/notes.txt belongs to no record"},
		{"a new record not in the index", func(t *testing.T, root string) {
			write(t, root, "results/gpu-x/new-5555aaa/README.md", "# New\n")
		}, "results/index.json is not what the records give"},
		{"a changed README heading", func(t *testing.T, root string) {
			write(t, root, "results/gpu-x/record-abc1234/README.md", "# Renamed\n")
		}, "results/README.md is not what the records give"},
		{"a broken link in README.md", func(t *testing.T, root string) {
			write(t, root, "README.md", "[gone](results/gpu-x/gone.txt)\n")
		}, "broken link: README.md: results/gpu-x/gone.txt"},
		{"a broken link in docs", func(t *testing.T, root string) {
			write(t, root, "docs/MORE.md", "[gone](../nowhere/)\n")
		}, "broken link: docs/MORE.md: ../nowhere/"},
		{"a broken link in a record's README", func(t *testing.T, root string) {
			write(t, root, "results/gpu-x/nohead/README.md", "[gone](missing.txt)\n")
		}, "broken link: results/gpu-x/nohead/README.md: missing.txt"},
		{"a link out of the repository", func(t *testing.T, root string) {
			write(t, root, "docs/OUT.md", "[out](../../elsewhere.md)\n")
		}, "(outside the repository)"},
		{"a .diff file", func(t *testing.T, root string) {
			write(t, root, "results/gpu-x/nohead/change.diff", "--- a\n")
		}, "results/gpu-x/nohead/change.diff: keep experiments as commits"},
		{"records.tsv names no record", func(t *testing.T, root string) {
			write(t, root, "results/records.tsv", "results/gpu-x/gone\tshows\tx\n")
		}, "results/records.tsv names results/gpu-x/gone, which is no record"},
		{"a machine folder without a README", func(t *testing.T, root string) {
			write(t, root, "results/tpu-z/a.txt", "x")
		}, "results/tpu-z has no README.md"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fixture(t)
			var stdout, stderr bytes.Buffer
			require.NoError(t, runIndex([]string{"-root", root}, &stdout, &stderr, fakeGit))
			tt.change(t, root)
			stderr.Reset()
			err := runIndex([]string{"-root", root, "-check"}, &stdout, &stderr, fakeGit)
			if tt.want == "" {
				require.NoError(t, err, stderr.String())
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "problems")
			assert.Contains(t, stderr.String(), tt.want)
		})
	}
}

func TestIndexErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no results folder", []string{"-root", "testdata/nonexistent"}, "report index"},
		{"an argument", []string{"extra"}, `unexpected argument "extra"`},
		{"an unknown flag", []string{"-nope"}, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := runIndex(tt.args, &stdout, &stderr, fakeGit)
			require.Error(t, err)
			assert.Contains(t, err.Error()+stderr.String(), tt.want)
		})
	}
}

func TestBadOverrides(t *testing.T) {
	root := fixture(t)
	write(t, root, "results/records.tsv", "results/gpu-x/loose.txt\tmachine\tx\n")
	var stdout, stderr bytes.Buffer
	err := runIndex([]string{"-root", root}, &stdout, &stderr, fakeGit)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "records.tsv:1: want path<TAB>field<TAB>value")
}

// write creates a file under root, with its folders.
func write(t *testing.T, root, rel, text string) {
	t.Helper()
	file := filepath.Join(root, filepath.FromSlash(rel))
	require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o755))
	require.NoError(t, os.WriteFile(file, []byte(text), 0o644))
}

func TestRelativeLinks(t *testing.T) {
	md := "[a](x.md) ![img](dir/p.png \"title\") [b](https://e.com/y.md) [c](#frag) [d](z.md#sec)\n" +
		"`[code](no.md)`\n```\n[fence](no2.md)\n```\n[ref]: <r%20s.md>\n[e](<sp.md>)\n"
	assert.Equal(t, []string{"x.md", "dir/p.png", "z.md", "sp.md", "r s.md"}, relativeLinks(md))
}

func TestReadmeCommand(t *testing.T) {
	tests := []struct{ name, md, want string }{
		{"fenced, build skipped", "```\ngo test -c -o x.test .\nx.test -test.bench . \\\n  -test.count 2\n```\n", "x.test -test.bench . -test.count 2"},
		{"code span with environment", "ran `CPU_TEST=a.test BACKENDS=\"p q\" scripts/cpu-compare.sh` there", "CPU_TEST=a.test BACKENDS=\"p q\" scripts/cpu-compare.sh"},
		{"a lone script name is no command", "see `probe.sh`", ""},
		{"a build alone is no command", "`go build ./cmd/x`", ""},
		{"a partial flag list is no command", "`-batches 1 -test.bench .`", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, readmeCommand(tt.md))
		})
	}
}

func TestCommitFromName(t *testing.T) {
	tests := []struct{ name, want string }{
		{"record-c0fbf3c", "c0fbf3c"},
		{"forward-base-e9d4da6-run2.txt", "e9d4da6"},
		{"cpu-compare-0c8676a.txt", "0c8676a"},
		{"cpu17", ""},
		{"http-client-chunks", ""},
		{"notes-defaced.txt", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, "results/m/README.md", "# m\n")
			write(t, root, "results/m/"+tt.name, "x")
			recs, _, err := collectRecords(root, nil, nil, nil)
			require.NoError(t, err)
			require.Len(t, recs, 1)
			got := recs[0].Commit
			if recs[0].CommitFrom != fromName {
				got = ""
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// appendIgnored are the config lines that may differ between two sessions of
// one sweep: -append does not compare them.
var appendIgnored = []string{"date"}

// appendTarget is an earlier results file that -append adds rounds to.
type appendTarget struct {
	path    string
	text    string            // the whole file
	config  map[string]string // the first value of each config line
	count   int               // the first line's -count: the rounds in the file
	countAt [2]int            // where the count's digits are in text
}

// headerCount splits a results file's first line around its -count value.
var headerCount = regexp.MustCompile(`^(# sweep .*? -count )(\d+)( .*)?\n`)

// readAppendTarget reads a results file written by a sweep.
func readAppendTarget(path string) (*appendTarget, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sweep: -append: %w", err)
	}
	t := &appendTarget{path: path, text: string(data), config: map[string]string{}}
	m := headerCount.FindStringSubmatchIndex(t.text)
	if m == nil {
		return nil, fmt.Errorf("sweep: -append %s: no \"# sweep ... -count N\" first line; is it a sweep's results file?", path)
	}
	t.countAt = [2]int{m[4], m[5]}
	if t.count, err = strconv.Atoi(t.text[m[4]:m[5]]); err != nil {
		return nil, fmt.Errorf("sweep: -append %s: reading the first line's -count: %w", path, err)
	}
	for _, line := range strings.Split(t.text, "\n") {
		if m := configLine.FindStringSubmatch(line); m != nil {
			if _, seen := t.config[m[1]]; !seen {
				t.config[m[1]] = m[2]
			}
		}
	}
	return t, nil
}

// checkSweep compares what the file records about its sweep with this one,
// before anything runs: the first line (matrix, -benchtime and dimensions;
// the count aside) and the sweep's own config lines but the date.
func (t *appendTarget) checkSweep(o *options) error {
	first, _, _ := strings.Cut(t.text, "\n")
	ours := strings.TrimSuffix(o.header(t.count), "\n")
	if first != ours {
		return fmt.Errorf("sweep: -append %s: the file's sweep was\n  %s\nbut this one is\n  %s\nresults of different setups must not be mixed (nothing was run)", t.path, first, ours)
	}
	own := map[string]string{}
	for _, kv := range o.ownConfig(nil) {
		own[kv[0]] = kv[1]
	}
	return t.differ(own, slices.Sorted(maps.Keys(own)), "nothing was run")
}

// checkConfig compares every config line of the file with those of the new
// rounds (the suite's and the sweep's own), except appendIgnored. A line on
// one side only is a difference too: the same commit on the same kind of
// machine prints the same lines.
func (t *appendTarget) checkConfig(got map[string]string, newRounds string) error {
	keys := slices.Collect(maps.Keys(got))
	keys = append(keys, slices.Collect(maps.Keys(t.config))...)
	slices.Sort(keys)
	return t.differ(got, slices.Compact(keys), "the new rounds are in "+newRounds)
}

// differ returns an error naming every config line in keys (but
// appendIgnored) whose value in the file differs from got's; where says what
// became of the new rounds.
func (t *appendTarget) differ(got map[string]string, keys []string, where string) error {
	show := func(v string, ok bool) string {
		if !ok {
			return "absent"
		}
		return strconv.Quote(v)
	}
	var diffs []string
	for _, key := range keys {
		if slices.Contains(appendIgnored, key) {
			continue
		}
		want, inFile := t.config[key]
		have, inGot := got[key]
		if inFile != inGot || want != have {
			diffs = append(diffs, fmt.Sprintf("%s: line is %s in the file but %s in this sweep", key, show(want, inFile), show(have, inGot)))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("sweep: -append %s: results of different setups must not be mixed (%s):\n  %s",
		t.path, where, strings.Join(diffs, "\n  "))
}

// add writes the file back with the new rounds from tmp after it and the
// first line's count raised by rounds.
func (t *appendTarget) add(rounds int, tmp *os.File, stdout io.Writer) error {
	text := t.text[:t.countAt[0]] + strconv.Itoa(t.count+rounds) + t.text[t.countAt[1]:]
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	if err := writeResults(t.path, text, tmp, stdout); err != nil {
		return fmt.Errorf("sweep: -append: %w (the new rounds are in %s)", err, tmp.Name())
	}
	return nil
}

// Package testref reads the PyTorch reference cases in testdata/reference, which
// scripts/make_reference.py writes: small BasicBlock ResNets saved with torch.save
// (zip and legacy formats) or as safetensors, an input batch for each, and the
// float64 logits PyTorch computed for it in eval mode.
//
// Back-end tests load the cases, run their model on Input and compare with Logits:
//
//	cases, err := testref.Load("../../testdata/reference")
//	for _, c := range cases {
//		got, err := c.Model.Reference(c.Input, c.N, c.H, c.W)
//		// compare got with c.Logits
//	}
package testref

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/inferbench/inferbench/inference/checkpoint"
	"github.com/inferbench/inferbench/inference/resnet"
)

// Case is one reference model with an input batch and PyTorch's logits for it.
type Case struct {
	Name   string
	Model  *resnet.Model
	N      int       // images in the batch
	H, W   int       // image height and width in pixels
	Input  []float32 // N x InChannels x H x W, NCHW
	Logits []float64 // N x Classes, row-major, from PyTorch in float64
}

// manifest is the layout of manifest.json.
type manifest struct {
	Cases []struct {
		Name       string    `json:"name"`
		Checkpoint string    `json:"checkpoint"`
		Format     string    `json:"format"`
		N          int       `json:"n"`
		H          int       `json:"h"`
		W          int       `json:"w"`
		Inputs     string    `json:"inputs"`
		Logits     []float64 `json:"logits"`
	} `json:"cases"`
}

// Load reads the cases listed in dir/manifest.json, in the order listed.
func Load(dir string) ([]Case, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("testref: %w", err)
	}
	var man manifest
	if err := json.Unmarshal(raw, &man); err != nil {
		return nil, fmt.Errorf("testref: %s: %w", filepath.Join(dir, "manifest.json"), err)
	}
	if len(man.Cases) == 0 {
		return nil, fmt.Errorf("testref: %s lists no cases", filepath.Join(dir, "manifest.json"))
	}
	cases := make([]Case, 0, len(man.Cases))
	for _, mc := range man.Cases {
		m, err := checkpoint.LoadResNet(filepath.Join(dir, mc.Checkpoint))
		if err != nil {
			return nil, fmt.Errorf("testref: case %s: %w", mc.Name, err)
		}
		io, err := checkpoint.Load(filepath.Join(dir, mc.Inputs))
		if err != nil {
			return nil, fmt.Errorf("testref: case %s: %w", mc.Name, err)
		}
		in, ok := io["input"]
		if !ok {
			return nil, fmt.Errorf("testref: case %s: %s has no tensor \"input\"", mc.Name, mc.Inputs)
		}
		if want := []int{mc.N, m.Arch.InChannels, mc.H, mc.W}; !slices.Equal(in.Shape, want) {
			return nil, fmt.Errorf("testref: case %s: input has shape %v, want %v", mc.Name, in.Shape, want)
		}
		if len(mc.Logits) != mc.N*m.Arch.Classes {
			return nil, fmt.Errorf("testref: case %s: %d logits, want %d images x %d classes", mc.Name, len(mc.Logits), mc.N, m.Arch.Classes)
		}
		cases = append(cases, Case{Name: mc.Name, Model: m, N: mc.N, H: mc.H, W: mc.W, Input: in.Data, Logits: mc.Logits})
	}
	return cases, nil
}

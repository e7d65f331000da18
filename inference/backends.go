package inference

import (
	"fmt"

	"github.com/inferbench/inferbench/inference/checkpoint"
	_ "github.com/inferbench/inferbench/inference/cpu" // the built-in back-end, registered as "cpu"
	"github.com/inferbench/inferbench/inference/resnet"
)

func loadCheckpoint(path string) (*resnet.Model, error) {
	m, err := checkpoint.LoadResNet(path)
	if err != nil {
		return nil, fmt.Errorf("inference: %w", err)
	}
	return m, nil
}

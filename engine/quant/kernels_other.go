//go:build !amd64

package quant

func supportedKernels() []*kernelSet { return []*kernelSet{portable} }

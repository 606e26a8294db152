package quant

// kernelSet is one implementation of the products. All give the same bits; they
// differ in speed and in the CPU features they need.
type kernelSet struct {
	name  string
	cols  int // columns per unit of work split among threads
	mul   func(w *Matrix, a *acts, j0, j1 int, out []float32, ldo int)
	row32 rowQuantizer32 // quantizes an activation row
	rowK  func(x []float32, blocks []byte)
}

var portable = &kernelSet{name: "go", cols: 4, mul: mulGo, row32: quantRow32Go, rowK: quantRowKGo}

// active is the fastest implementation the CPU runs (supportedKernels, per
// architecture); tests switch it to hold each one to the portable kernels.
var active = supportedKernels()[0]

func kernels() *kernelSet { return active }

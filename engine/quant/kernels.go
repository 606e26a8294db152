package quant

// kernelSet is one implementation of the products. All give the same bits; they
// differ in speed and in the CPU features they need.
type kernelSet struct {
	name string
	cols int // columns per unit of work split among threads
	mul  func(w *Matrix, a *acts, j0, j1 int, out []float32, ldo int)
}

var portable = &kernelSet{name: "go", cols: 4, mul: mulGo}

// active is chosen at start-up from the CPU's features (kernels_amd64.go); tests
// switch it to hold each implementation to the portable one.
var active = portable

func kernels() *kernelSet { return active }

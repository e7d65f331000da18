package dl

import "unsafe"

// Table opens the first of names that the loader finds, resolves every symbol
// in order and hands each address to set (which stores it in the caller's C
// function table). A missing symbol closes the library and is an error naming
// it, so a table is either complete or not loaded at all.
func Table(names, symbols []string, set func(i int, p unsafe.Pointer)) (*Lib, error) {
	lib, err := Open(names...)
	if err != nil {
		return nil, err
	}
	for i, name := range symbols {
		p, err := lib.Sym(name)
		if err != nil {
			_ = lib.Close()
			return nil, err
		}
		set(i, p)
	}
	return lib, nil
}

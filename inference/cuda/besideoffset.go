package cuda

// besideAlign is where the shortcut's part of the workspace starts, when a
// graph runs a block's shortcut beside its conv1 (beside.go): a multiple of
// this many bytes.
const besideAlign = 256

// besideOffset is the offset of the shortcut's part of the workspace when
// conv1 needs ws1 bytes: the first multiple of besideAlign at or past ws1.
func besideOffset(ws1 uintptr) uintptr { return (ws1 + besideAlign - 1) / besideAlign * besideAlign }

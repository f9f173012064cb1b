// The library is one target per layer (see Package.swift and
// docs/Architecture.md, "Layers"); this target is the top: it re-exports
// every layer, so `import RingIO` gives the whole public API (and
// `@_spi(Engine) import RingIO` the engine's SPI).
@_exported import RingIOData
@_spi(Engine) @_exported import RingIOEngine
@_exported import RingIOQueue
@_exported import RingIOChannel
@_exported import RingIOSources
@_exported import RingIOCopy
@_exported import RingIOFiles

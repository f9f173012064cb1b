// The library is one target per layer (see Package.swift and
// docs/Architecture.md, "Layers"); this target is the channel layer. It
// re-exports the layers below, so `import RingIO` gives the whole public API
// (and `@_spi(Engine) import RingIO` the engine's SPI).
@_exported import RingIOData
@_spi(Engine) @_exported import RingIOEngine
@_exported import RingIOQueue

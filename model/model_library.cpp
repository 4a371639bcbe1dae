// placeholder so the library target has a source until model code lands
namespace hearsay {}

# One step of the dashboard build, run by web/CMakeLists.txt as `cmake -P`:
#   STEP=install  npm ci in WORK from SRC's package.json and package-lock.json
#   STEP=bundle   node build.mjs: SRC/src → OUT/app.js, OUT/app.css
# A step that cannot run writes its reason (WORK/npm.failed, OUT/NOT_BUILT) and still succeeds:
# the agent then builds without the dashboard and its page says why. A failed step leaves its
# stamp untouched, so the next build tries again (npm with short fetch timeouts, so an offline
# machine loses seconds, not minutes).
file(MAKE_DIRECTORY ${WORK} ${OUT})
set(reason "")
if(NOT NODE OR NOT NPM)
  set(reason "node and npm were not found when gpuwatch was built (scripts/deps.sh installs them)")
elseif(STEP STREQUAL "install")
  file(REMOVE ${WORK}/npm.failed)
  configure_file(${SRC}/package.json ${WORK}/package.json COPYONLY)
  configure_file(${SRC}/package-lock.json ${WORK}/package-lock.json COPYONLY)
  configure_file(${SRC}/build.mjs ${WORK}/build.mjs COPYONLY)
  # --ignore-scripts: esbuild's binary comes as its platform package; nothing else runs.
  execute_process(COMMAND ${NPM} ci --no-audit --no-fund --ignore-scripts --loglevel=error
                          --fetch-retries=1 --fetch-timeout=30000 --fetch-retry-maxtimeout=10000
                  WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 600)
  if(NOT rc EQUAL 0)
    string(REGEX REPLACE "\n+$" "" err "${err}")
    set(reason "npm ci failed (${rc}): ${err}")
  endif()
elseif(STEP STREQUAL "bundle")
  file(REMOVE ${OUT}/NOT_BUILT)
  if(EXISTS ${WORK}/npm.failed)
    file(READ ${WORK}/npm.failed reason)
  else()
    configure_file(${SRC}/build.mjs ${WORK}/build.mjs COPYONLY)
    execute_process(COMMAND ${NODE} ${WORK}/build.mjs ${OUT} ${WORK}/node_modules ${SRC}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
    if(NOT rc EQUAL 0)
      set(reason "the bundle failed (${rc}): ${err}")
    endif()
  endif()
endif()
if(reason)
  message(WARNING "gpuwatch: the dashboard is not built: ${reason}")
  if(STEP STREQUAL "install")
    file(WRITE ${WORK}/npm.failed "${reason}")
  else()
    file(WRITE ${OUT}/NOT_BUILT "${reason}")
    file(REMOVE ${OUT}/app.js ${OUT}/app.css)
  endif()
endif()
# The bundle's stamp always: embedding needs it, and NOT_BUILT says what happened. The
# install's only on success, so a failed npm ci is tried again by the next build.
if(STEP STREQUAL "install" AND NOT reason)
  file(TOUCH ${WORK}/installed.stamp)
elseif(STEP STREQUAL "bundle")
  file(TOUCH ${OUT}/built.stamp)
endif()

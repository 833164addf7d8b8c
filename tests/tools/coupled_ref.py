#!/usr/bin/python3
"""An independent float32 model of src/sample/race.c (numpy's float32 arithmetic, which rounds
each operation as IEEE single precision does): prints the noise key of (seed 42, position 0) and
the noise of tokens 0 and 1000, the values tests/test_sample.c pins. Run with Debian's
/usr/bin/python3 and python3-numpy."""
import math
import numpy as np
M=(1<<64)-1
def mix64(z):
    z&=M
    z=((z^(z>>30))*0xbf58476d1ce4e5b9)&M
    z=((z^(z>>27))*0x94d049bb133111eb)&M
    return z^(z>>31)
G=0x9e3779b97f4a7c15
def key(seed,pos): return mix64(mix64(seed+G)^mix64((pos*G+0x632be59bd9b4e019)&M))
f=np.float32
def noise(k,x):
    z=mix64(k+x*G); v=z>>32; v|=1
    V=f(v)*f(2.0**-32)
    vmax=f(np.nextafter(f(1),f(0)))
    if V>vmax: V=vmax
    w=f(1)-V
    b=int(np.array(w,dtype=np.float32).view(np.uint32))
    mb=(b&0x7fffff)|0x3f800000
    m1=np.array(mb,dtype=np.uint32).view(np.float32)[()]
    mh=m1*f(0.5); big=m1>f(1.41421356)
    m=mh if big else m1
    ex=f((b>>23)-127+int(big))
    small=V<=f(0.29)
    num=-V if small else m-f(1); den=f(2)-V if small else m+f(1); e=f(0) if small else ex
    s=num/den; t=s*s
    series=f(1)+t*(f(1)/f(3)+t*(f(1)/f(5)+t*(f(1)/f(7)+t*(f(1)/f(9)))))
    return -(e*f(0.693147180559945)+f(2)*s*series)
k = key(42, 0)
print(hex(k), float(noise(k, 0)).hex(), float(noise(k, 1000)).hex())
# against -ln(1 - V) in double: the float series is within a few units of the last place
for x in (0, 1000):
    V = ((mix64(k + x * G) >> 32) | 1) / 2**32
    print(x, float(noise(k, x)), -math.log(1 - V))
